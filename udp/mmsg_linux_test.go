//go:build linux

package udp

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"
)

// TestSendStatePartialAndEAGAIN drives the sendmmsg loop directly on a
// non-blocking AF_UNIX datagram socketpair, whose small send buffer fills up
// in the middle of a batch: send must keep what was sent, report EAGAIN as
// "wait" (false), and finish the rest once the reader drained the queue.
func TestSendStatePartialAndEAGAIN(t *testing.T) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Skipf("socketpair: %v", err)
	}
	defer unix.Close(fds[0])
	defer unix.Close(fds[1])
	// Peers of a socketpair skip the queue-length limit; a tiny send buffer
	// (the kernel rounds it up to its minimum) makes the sender wait.
	if err := unix.SetsockoptInt(fds[0], unix.SOL_SOCKET, unix.SO_SNDBUF, 1); err != nil {
		t.Fatal(err)
	}

	const n = 256
	bufs := make([][]byte, n)
	for i := range bufs {
		bufs[i] = []byte{byte(i), byte(i >> 8)}
	}
	s := newSendState(n, nil)
	s.prepare(bufs, 0, nil) // connected socket: no address
	r := newRecvState(n)
	in := make([][]byte, n)
	for i := range in {
		in[i] = make([]byte, 8)
	}
	sizes := make([]int, n)
	eps := make([]netip.AddrPort, n)

	next, rounds := 0, 0
	for ; ; rounds++ {
		done := s.send(uintptr(fds[0]))
		if s.err != nil {
			t.Fatalf("send: %v", s.err)
		}
		if done {
			break
		}
		if s.off == 0 || s.off >= n {
			t.Fatalf("send waited with %d of %d sent", s.off, n)
		}
		if rounds > n {
			t.Fatal("no progress")
		}
		// Drain what arrived so far, checking order.
		r.prepare(in, n)
		if ok := r.recv(uintptr(fds[1])); !ok || r.err != nil {
			t.Fatalf("recv: done=%v err=%v", ok, r.err)
		}
		got := r.finish(sizes, eps)
		for i := range got {
			if sizes[i] != 2 || int(in[i][0])|int(in[i][1])<<8 != next {
				t.Fatalf("datagram %d out of order: %x", next, in[i][:sizes[i]])
			}
			next++
		}
	}
	if rounds == 0 {
		t.Fatal("the socketpair queue never filled: EAGAIN path not exercised")
	}
	t.Logf("sendmmsg waited %d times for %d datagrams", rounds, n)
	s.release()
	for next < n {
		r.prepare(in, n)
		if !r.recv(uintptr(fds[1])) || r.err != nil {
			t.Fatalf("final recv: err=%v", r.err)
		}
		got := r.finish(sizes, eps)
		for i := range got {
			if int(in[i][0])|int(in[i][1])<<8 != next {
				t.Fatalf("datagram %d out of order", next)
			}
			next++
		}
	}
	// Nothing left: recv asks to wait instead of failing.
	r.prepare(in, n)
	if r.recv(uintptr(fds[1])) {
		t.Errorf("recv on an empty socket did not wait: got %d, err %v", r.got, r.err)
	}
	r.finish(sizes, eps)
}

func TestSockaddrRoundTrip(t *testing.T) {
	cases := []struct {
		ep   string
		v6   bool
		want string
	}{
		{"192.0.2.7:51820", false, "192.0.2.7:51820"},
		{"[::ffff:192.0.2.7]:51820", false, "192.0.2.7:51820"},
		{"192.0.2.7:51820", true, "192.0.2.7:51820"}, // mapped out, unmapped back
		{"[2001:db8::1]:443", true, "[2001:db8::1]:443"},
		{"[fe80::1%7]:9", true, "[fe80::1%7]:9"},
	}
	var sa sockaddr
	for _, c := range cases {
		n, err := encodeSockaddr(&sa, netip.MustParseAddrPort(c.ep), c.v6)
		if err != nil {
			t.Errorf("%s: %v", c.ep, err)
			continue
		}
		if (n == unix.SizeofSockaddrInet6) != c.v6 {
			t.Errorf("%s: length %d on v6=%v", c.ep, n, c.v6)
		}
		if got := decodeSockaddr(&sa).String(); got != c.want {
			t.Errorf("%s: decoded %s, want %s", c.ep, got, c.want)
		}
	}
	if _, err := encodeSockaddr(&sa, netip.MustParseAddrPort("[fe80::1%lo]:9"), true); err != nil {
		t.Errorf("named zone: %v", err)
	} else if sa.Scope_id == 0 {
		t.Error("named zone lo gave scope 0")
	}
	if _, err := encodeSockaddr(&sa, netip.MustParseAddrPort("[fe80::1%no-such-if0]:9"), true); err == nil {
		t.Error("unknown zone accepted")
	}
	sa = sockaddr{Family: 0xffff}
	if decodeSockaddr(&sa).IsValid() {
		t.Error("unknown family decoded")
	}

	v4, v6 := netip.MustParseAddrPort("192.0.2.7:1"), netip.MustParseAddrPort("[2001:db8::1]:2")
	allocs := testing.AllocsPerRun(100, func() {
		_, _ = encodeSockaddr(&sa, v4, true)
		_ = decodeSockaddr(&sa)
		_, _ = encodeSockaddr(&sa, v6, true)
		_ = decodeSockaddr(&sa)
	})
	if allocs != 0 {
		t.Errorf("encode/decode allocates %v times", allocs)
	}
}
