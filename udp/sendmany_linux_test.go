package udp

import (
	"bytes"
	"net/netip"
	"testing"
)

// TestSendMany: one call delivers each datagram to its own endpoint, in
// order, more than a batch of them; a plain Send after it still goes to
// its single destination; mismatched lengths and an unreachable family
// fail before anything is sent.
func TestSendMany(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{BatchSize: 8})
	b := listen(t, "127.0.0.1:0", Options{})
	c := listen(t, "127.0.0.1:0", Options{})
	watchdog(t, b)
	watchdog(t, c)
	const n = 21 // three batches of a's 8
	var bufs [][]byte
	var eps []netip.AddrPort
	for i := range n {
		bufs = append(bufs, bytes.Repeat([]byte{byte(i)}, 16+i))
		if i%3 == 0 {
			eps = append(eps, c.LocalAddr())
		} else {
			eps = append(eps, b.LocalAddr())
		}
	}
	if err := a.SendMany(bufs, eps); err != nil {
		t.Fatal(err)
	}
	check := func(r *LinuxBind, want [][]byte) {
		t.Helper()
		in := newBatch(len(want), 2048)
		if err := receiveN(r, in, len(want)); err != nil {
			t.Fatal(err)
		}
		for i := range want {
			if got := in.bufs[i][:in.sizes[i]]; !bytes.Equal(got, want[i]) || in.eps[i] != a.LocalAddr() {
				t.Fatalf("%v datagram %d: % x from %v, want % x from %v", r.LocalAddr(), i, got, in.eps[i], want[i], a.LocalAddr())
			}
		}
	}
	var toB, toC [][]byte
	for i := range n {
		if eps[i] == c.LocalAddr() {
			toC = append(toC, bufs[i])
		} else {
			toB = append(toB, bufs[i])
		}
	}
	check(b, toB)
	check(c, toC)
	// The shared-destination path is intact afterwards.
	exchange(t, a, b, b.LocalAddr(), a.LocalAddr())

	if err := a.SendMany(bufs[:2], eps[:1]); err == nil {
		t.Error("SendMany accepted two datagrams for one endpoint")
	}
	if err := a.SendMany(bufs[:1], []netip.AddrPort{netip.MustParseAddrPort("[2001:db8::1]:9")}); err == nil {
		t.Error("SendMany to IPv6 from an IPv4 socket succeeded")
	}
}

func TestSendManyAllocs(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	bufs := [][]byte{make([]byte, 48), make([]byte, 48)}
	eps := []netip.AddrPort{b.LocalAddr(), b.LocalAddr()}
	in := newBatch(2, 2048)
	if n := testing.AllocsPerRun(200, func() {
		if err := a.SendMany(bufs, eps); err != nil {
			t.Fatal(err)
		}
		if err := receiveN(b, in, 2); err != nil {
			t.Fatal(err)
		}
	}); n != 0 {
		t.Errorf("SendMany: %.1f allocations per call, want 0", n)
	}
}
