//go:build linux

package earlydrop

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func needRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("loading eBPF needs root; CI runs as root")
		}
		t.Skip("loading eBPF needs root")
	}
}

func msg(typ byte, size int, fill byte) []byte {
	b := bytes.Repeat([]byte{fill}, size)
	if size > 0 {
		b[0] = typ
	}
	for i := 1; i < 4 && i < size; i++ {
		b[i] = 0
	}
	return b
}

func transport(idx uint32, size int) []byte {
	b := msg(bhcrypto.MsgTransport, size, 0xab)
	binary.LittleEndian.PutUint32(b[4:8], idx)
	return b
}

// relayMsg is a relay message (type 5, package crypto) for index idx.
func relayMsg(idx uint32, size int) []byte {
	b := transport(idx, size)
	b[0] = bhcrypto.MsgRelay
	return b
}

// pair is a receiving socket with the filter and a sender on loopback.
type pair struct {
	t    *testing.T
	rx   *net.UDPConn
	tx   *net.UDPConn
	f    *Filter
	buf  []byte
	seen int
}

func newPair(t *testing.T, network, rxAddr, txAddr string) *pair {
	t.Helper()
	rx, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(rxAddr)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rx.Close() })
	to := rx.LocalAddr().(*net.UDPAddr).AddrPort()
	if to.Addr().IsUnspecified() {
		to = netip.AddrPortFrom(netip.MustParseAddrPort(txAddr).Addr(), to.Port())
	}
	tx, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort(txAddr)), net.UDPAddrFromAddrPort(to))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { tx.Close() })
	f, err := Attach(rx)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Detach(); f.Close() })
	return &pair{t: t, rx: rx, tx: tx, f: f, buf: make([]byte, 2048)}
}

// marker passes the filter whatever its state: a well-sized cookie reply
// (not subject to blocking).
func marker(n int) []byte {
	b := msg(bhcrypto.MsgCookieReply, bhcrypto.CookieReplySize, 0)
	binary.LittleEndian.PutUint32(b[4:8], uint32(n))
	b[8] = 0x5a
	return b
}

// passes sends probe then a marker and reports whether the probe reached
// the socket. Loopback delivers in order, so the marker arriving first
// means the probe was dropped.
func (p *pair) passes(probe []byte) bool {
	p.t.Helper()
	p.seen++
	m := marker(p.seen)
	if _, err := p.tx.Write(probe); err != nil {
		p.t.Fatal(err)
	}
	if _, err := p.tx.Write(m); err != nil {
		p.t.Fatal(err)
	}
	got := false
	for {
		p.rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := p.rx.Read(p.buf)
		if err != nil {
			p.t.Fatalf("waiting for marker %d: %v", p.seen, err)
		}
		if bytes.Equal(p.buf[:n], m) {
			return got
		}
		if !bytes.Equal(p.buf[:n], probe) {
			p.t.Fatalf("unexpected datagram of %d bytes", n)
		}
		got = true
	}
}

func (p *pair) counts() [NumReasons]uint64 {
	p.t.Helper()
	c, err := p.f.Counts()
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

func TestFilter(t *testing.T) {
	needRoot(t)
	for _, tc := range []struct{ name, network, rx, tx string }{
		{"ipv4", "udp4", "127.0.0.1:0", "127.0.0.1:0"},
		{"ipv6", "udp6", "[::1]:0", "[::1]:0"},
		{"ipv4 to dual-stack", "udp", "[::]:0", "127.0.0.1:0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := newPair(t, tc.network, tc.rx, tc.tx)
			const idx = 0x01020304
			reserved := transport(idx, 64)
			reserved[2] = 1
			lane := transport(idx, 64)
			lane[1] = 0x9c
			relayLane := relayMsg(idx, 100)
			relayLane[1] = 1
			cases := []struct {
				name   string
				probe  []byte
				pass   bool
				reason Reason
			}{
				{"runt 1 byte", []byte{4}, false, ReasonRunt},
				{"runt 3 bytes", []byte{4, 0, 0}, false, ReasonRunt},
				{"unknown type", msg(9, 100, 1), false, ReasonUnknownType},
				{"type zero", msg(0, 100, 0), false, ReasonUnknownType},
				{"initiation", msg(1, bhcrypto.InitiationSize, 7), true, 0},
				{"initiation short", msg(1, bhcrypto.InitiationSize-1, 7), false, ReasonBadSize},
				{"initiation long", msg(1, bhcrypto.InitiationSize+1, 7), false, ReasonBadSize},
				{"response", msg(2, bhcrypto.ResponseSize, 7), true, 0},
				{"response short", msg(2, bhcrypto.ResponseSize-1, 7), false, ReasonBadSize},
				{"cookie reply", msg(3, bhcrypto.CookieReplySize, 7), true, 0},
				{"cookie reply long", msg(3, bhcrypto.CookieReplySize+16, 7), false, ReasonBadSize},
				{"transport runt", transport(idx, bhcrypto.TransportOverhead-1), false, ReasonRunt},
				{"transport reserved", reserved, false, ReasonUnknownType},
				{"transport lane byte, unknown index", lane, false, ReasonUnknownIndex},
				{"relay byte 1", relayLane, false, ReasonUnknownType},
				{"transport unknown index", transport(idx, 100), false, ReasonUnknownIndex},
				{"relay runt", relayMsg(idx, bhcrypto.RelayOverhead-1), false, ReasonRunt},
				{"relay unknown index", relayMsg(idx, 100), false, ReasonUnknownIndex},
			}
			for _, c := range cases {
				before := p.counts()
				if got := p.passes(c.probe); got != c.pass {
					t.Errorf("%s: passed=%v, want %v", c.name, got, c.pass)
				}
				after := p.counts()
				for r := range NumReasons {
					want := before[r]
					if !c.pass && r == c.reason {
						want++
					}
					if after[r] != want {
						t.Errorf("%s: %s count %d -> %d, want %d", c.name, r, before[r], after[r], want)
					}
				}
			}

			// A known index passes; a removed one no longer does.
			if err := p.f.AddIndex(idx); err != nil {
				t.Fatal(err)
			}
			if !p.passes(transport(idx, 100)) {
				t.Error("transport with a known index dropped")
			}
			if !p.passes(lane) {
				t.Error("transport with a lane byte and a known index dropped")
			}
			if !p.passes(transport(idx, bhcrypto.TransportOverhead)) {
				t.Error("keepalive-sized transport with a known index dropped")
			}
			if p.passes(transport(idx+1, 100)) {
				t.Error("transport with another index passed")
			}
			if !p.passes(relayMsg(idx, bhcrypto.RelayOverhead)) {
				t.Error("relay message with a known index dropped")
			}
			if err := p.f.RemoveIndex(idx); err != nil {
				t.Fatal(err)
			}
			if err := p.f.RemoveIndex(idx); err != nil {
				t.Fatalf("removing twice: %v", err)
			}
			if p.passes(transport(idx, 100)) {
				t.Error("transport with a removed index passed")
			}

			// Unknown indices from a configured peer endpoint pass, so
			// the router can offer that peer a handshake.
			from := p.tx.LocalAddr().(*net.UDPAddr).AddrPort()
			other := netip.AddrPortFrom(from.Addr(), from.Port()+1)
			if err := p.f.SetEndpoints([]netip.AddrPort{other}); err != nil {
				t.Fatal(err)
			}
			if p.passes(transport(idx, 100)) {
				t.Error("unknown index from another port passed")
			}
			if err := p.f.SetEndpoints([]netip.AddrPort{other, from}); err != nil {
				t.Fatal(err)
			}
			if !p.passes(transport(idx, 100)) {
				t.Errorf("unknown index from peer endpoint %s dropped", from)
			}
			if err := p.f.SetEndpoints([]netip.AddrPort{other}); err != nil {
				t.Fatal(err)
			}
			if p.passes(transport(idx, 100)) {
				t.Error("unknown index passed after its endpoint was removed")
			}

			// A blocked source's handshakes are dropped, except from
			// a configured endpoint; transport messages are not
			// affected; unblocking lets them through again.
			if err := p.f.Block(from.Addr(), time.Hour); err != nil {
				t.Fatal(err)
			}
			if err := p.f.AddIndex(idx); err != nil {
				t.Fatal(err)
			}
			c0 := p.counts()
			if p.passes(msg(1, bhcrypto.InitiationSize, 3)) {
				t.Error("initiation from a blocked source passed")
			}
			if p.passes(msg(2, bhcrypto.ResponseSize, 3)) {
				t.Error("response from a blocked source passed")
			}
			if !p.passes(msg(3, bhcrypto.CookieReplySize, 3)) {
				t.Error("cookie reply from a blocked source dropped")
			}
			if !p.passes(transport(idx, 100)) {
				t.Error("transport from a blocked source dropped")
			}
			if got := p.counts()[ReasonBlocked] - c0[ReasonBlocked]; got != 2 {
				t.Errorf("blocked count +%d, want +2", got)
			}
			if err := p.f.SetEndpoints([]netip.AddrPort{from}); err != nil {
				t.Fatal(err)
			}
			if !p.passes(msg(1, bhcrypto.InitiationSize, 3)) {
				t.Error("initiation from a blocked peer endpoint dropped")
			}
			if err := p.f.SetEndpoints(nil); err != nil {
				t.Fatal(err)
			}
			if err := p.f.Block(from.Addr(), 0); err != nil {
				t.Fatal(err)
			}
			if !p.passes(msg(1, bhcrypto.InitiationSize, 3)) {
				t.Error("initiation dropped after unblocking")
			}
			if err := p.f.Block(from.Addr(), time.Nanosecond); err != nil {
				t.Fatal(err)
			}
			if !p.passes(msg(1, bhcrypto.InitiationSize, 3)) {
				t.Error("initiation dropped after the block expired")
			}
			p.f.RemoveIndex(idx)

			// Detached: everything reaches the socket, counts stay.
			before := p.counts()
			if err := p.f.Detach(); err != nil {
				t.Fatal(err)
			}
			if p.f.Attached() {
				t.Error("Attached after Detach")
			}
			for _, probe := range [][]byte{{1}, msg(9, 50, 1), transport(idx, 100)} {
				if !p.passes(probe) {
					t.Errorf("detached filter dropped a %d-byte datagram", len(probe))
				}
			}
			if p.counts() != before {
				t.Error("counts moved after Detach")
			}
		})
	}
}

func TestEndpointKey(t *testing.T) {
	k4 := endpointKey(netip.MustParseAddrPort("203.0.113.2:51820"))
	want4 := [endpointKeySize]byte{10: 0xff, 11: 0xff, 12: 203, 13: 0, 14: 113, 15: 2, 16: 0xca, 17: 0x6c}
	if k4 != want4 {
		t.Errorf("IPv4 key %x, want %x", k4, want4)
	}
	if endpointKey(netip.MustParseAddrPort("[::ffff:203.0.113.2]:51820")) != want4 {
		t.Error("IPv4-mapped and IPv4 endpoints differ")
	}
	k6 := endpointKey(netip.MustParseAddrPort("[2001:db8::1]:443"))
	if k6[0] != 0x20 || k6[1] != 0x01 || k6[15] != 1 || k6[16] != 0x01 || k6[17] != 0xbb {
		t.Errorf("IPv6 key %x", k6)
	}
}

// TestCoalescedPass: a coalesced run (UDP GRO) is passed on whole, since
// the program sees only its first segment; the router checks each one.
func TestCoalescedPass(t *testing.T) {
	needRoot(t)
	p := newPair(t, "udp4", "127.0.0.1:0", "127.0.0.1:0")
	setInt := func(c *net.UDPConn, opt, v int) {
		t.Helper()
		rc, err := c.SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_UDP, opt, v) }); err != nil {
			t.Fatal(err)
		}
		if serr != nil {
			t.Skipf("setsockopt %d: %v", opt, serr)
		}
	}
	setInt(p.rx, unix.UDP_GRO, 1)
	// Two 100-byte transport messages with an unknown index, sent as
	// one segmented datagram: each alone would be dropped.
	probe := append(transport(7, 100), transport(7, 100)...)
	setInt(p.tx, unix.UDP_SEGMENT, 100)
	if _, err := p.tx.Write(probe); err != nil {
		t.Fatal(err)
	}
	setInt(p.tx, unix.UDP_SEGMENT, 0)
	p.seen++
	m := marker(p.seen)
	if _, err := p.tx.Write(m); err != nil {
		t.Fatal(err)
	}
	var got []byte
	for {
		p.rx.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := p.rx.Read(p.buf)
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Equal(p.buf[:n], m) {
			break
		}
		got = append(got, p.buf[:n]...)
	}
	if !bytes.Equal(got, probe) {
		t.Errorf("coalesced run: got %d bytes, want the %d sent", len(got), len(probe))
	}
	// The same message alone is dropped.
	if p.passes(transport(7, 100)) {
		t.Error("single transport with unknown index passed")
	}
}

// flakyConn is the receiving socket of a pair whose first detach fails:
// its raw connection refuses one Control call, then passes them on.
type flakyConn struct {
	*net.UDPConn
	fails int
}

func (c *flakyConn) SyscallConn() (syscall.RawConn, error) {
	rc, err := c.UDPConn.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &flakyRawConn{RawConn: rc, c: c}, nil
}

type flakyRawConn struct {
	syscall.RawConn
	c *flakyConn
}

func (r *flakyRawConn) Control(f func(fd uintptr)) error {
	if r.c.fails > 0 {
		r.c.fails--
		return errors.New("injected control failure")
	}
	return r.RawConn.Control(f)
}

// TestDetachFailureRetried: a detach the kernel refused leaves the filter
// attached and reported so; the retry detaches it for real.
func TestDetachFailureRetried(t *testing.T) {
	p := newPair(t, "udp4", "127.0.0.1:0", "127.0.0.1:0")
	p.f.conns = []syscall.Conn{&flakyConn{UDPConn: p.rx, fails: 1}}
	unknown := transport(0xdecaf, 100)
	if p.passes(unknown) {
		t.Fatal("attached filter passed an unknown index")
	}
	if err := p.f.Detach(); err == nil {
		t.Fatal("injected detach failure not reported")
	}
	if !p.f.Attached() {
		t.Fatal("filter reported detached after a failed detach")
	}
	if p.passes(unknown) {
		t.Fatal("filter gone after a failed detach")
	}
	if err := p.f.Detach(); err != nil {
		t.Fatalf("retried detach: %v", err)
	}
	if p.f.Attached() {
		t.Fatal("Attached after a successful detach")
	}
	if !p.passes(unknown) {
		t.Fatal("the retried detach left the program on the socket")
	}
}
