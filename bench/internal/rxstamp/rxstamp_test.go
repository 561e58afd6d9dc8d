package rxstamp

import (
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/internal/threadwait"
)

// TestStamp: once the kernel stamps arrivals, a datagram sent over
// loopback carries a stamp between the send and the moment the socket
// reports it readable, and a read after a delay still reports that time,
// not the read's. The kernel turns arrival stamping on (a static key) from
// a work item some time after the first socket asks for it; a datagram
// that arrives before then is stamped when it is read. So every datagram's
// stamp must lie between its send and its read, and within a few tries
// one must carry its arrival time.
func TestStamp(t *testing.T) {
	rx, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer rx.Close()
	if err := Enable(rx); err != nil {
		t.Fatal(err)
	}
	tx, err := net.DialUDP("udp4", nil, rx.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Close()
	const delay, tries = 50 * time.Millisecond, 40
	buf, oob := make([]byte, 16), make([]byte, OOBSize)
	for try := 1; ; try++ {
		sent := time.Now()
		if _, err := tx.Write([]byte("x")); err != nil {
			t.Fatal(err)
		}
		waitReadable(t, rx)
		queued := time.Now()
		time.Sleep(delay)
		_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
		if err != nil {
			t.Fatal(err)
		}
		read := time.Now()
		at, err := Parse(oob[:oobn])
		if err != nil {
			t.Fatal(err)
		}
		if at.Before(sent.Add(-time.Millisecond)) || at.After(read) {
			t.Fatalf("stamped %v: sent at %v, read at %v", at, sent, read)
		}
		if !at.After(queued) && read.Sub(at) >= delay {
			return // stamped on arrival
		}
		if try == tries {
			t.Fatalf("%d datagrams, none stamped on arrival: the last stamped %v, queued by %v, read at %v", tries, at, queued, read)
		}
	}
}

// waitReadable blocks until c has a datagram queued, or fails after 10 s.
func waitReadable(t *testing.T, c *net.UDPConn) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	p := threadwait.New()
	for ready := false; !ready; {
		if ready, err = p.Wait(raw, time.Until(deadline), false); err != nil {
			t.Fatalf("waiting for the datagram: %v", err)
		}
		if !ready && time.Now().After(deadline) {
			t.Fatal("no datagram queued after 10 s")
		}
	}
}

// TestParseErrors: no message, another message, a short one.
func TestParseErrors(t *testing.T) {
	other := unix.UnixRights(3)
	short := make([]byte, unix.CmsgSpace(4))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&short[0]))
	h.Level, h.Type = unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS
	h.SetLen(unix.CmsgLen(4))
	for _, tc := range []struct {
		name string
		oob  []byte
	}{
		{"empty", nil},
		{"rights only", other},
		{"short stamp", short},
		{"truncated header", []byte{1, 2, 3}},
	} {
		if _, err := Parse(tc.oob); err == nil {
			t.Errorf("%s: no error", tc.name)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte{})
	f.Add(unix.UnixRights(3))
	f.Fuzz(func(t *testing.T, oob []byte) {
		Parse(oob) // must not panic
	})
}
