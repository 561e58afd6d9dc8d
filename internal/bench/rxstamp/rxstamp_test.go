package rxstamp

import (
	"net"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// TestStamp: a datagram sent over loopback carries a kernel timestamp
// between the send and the moment the socket reports it readable, and a
// read after a delay still reports that time, not the read's. The bounds
// hold however late the loopback's softirq runs on a loaded machine: the
// test waits for the datagram to be queued instead of assuming it is
// queued by a deadline.
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
	sent := time.Now()
	if _, err := tx.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	waitReadable(t, rx)
	queued := time.Now()
	const delay = 50 * time.Millisecond
	time.Sleep(delay)
	buf, oob := make([]byte, 16), make([]byte, OOBSize)
	_, oobn, _, _, err := rx.ReadMsgUDP(buf, oob)
	if err != nil {
		t.Fatal(err)
	}
	read := time.Now()
	at, err := Parse(oob[:oobn])
	if err != nil {
		t.Fatal(err)
	}
	if at.Before(sent.Add(-time.Millisecond)) || at.After(queued) || read.Sub(at) < delay {
		t.Errorf("stamped %v: sent at %v, queued by %v, read at %v after a %v sleep", at, sent, queued, read, delay)
	}
}

// waitReadable blocks until c has a datagram queued, or fails after 10 s.
func waitReadable(t *testing.T, c *net.UDPConn) {
	t.Helper()
	raw, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var n int
	var perr error
	if err := raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, perr = unix.Poll(fds, 10_000)
			if perr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	if perr != nil || n != 1 {
		t.Fatalf("poll: %d ready, %v", n, perr)
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
