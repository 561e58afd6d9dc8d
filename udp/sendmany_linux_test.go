package udp

import (
	"bytes"
	"net/netip"
	"slices"

	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

// TestSendManyGrouping: runs of consecutive datagrams to one endpoint
// become segmented messages addressed to it; a change of endpoint ends a
// run as a change of size or lane byte does.
func TestSendManyGrouping(t *testing.T) {
	b1 := netip.MustParseAddrPort("192.0.2.1:1")
	b2 := netip.MustParseAddrPort("192.0.2.2:2")
	cases := []struct {
		name  string
		eps   []netip.AddrPort
		sizes []int
		want  []int // datagrams per message
		to    []netip.AddrPort
	}{
		{"one-hop", []netip.AddrPort{b1, b1, b1, b1}, []int{100, 100, 100, 40}, []int{4}, []netip.AddrPort{b1}},
		{"two-hops", []netip.AddrPort{b1, b1, b2, b2, b2}, []int{100, 100, 100, 100, 100}, []int{2, 3}, []netip.AddrPort{b1, b2}},
		{"interleaved", []netip.AddrPort{b1, b2, b1, b2}, []int{100, 100, 100, 100}, []int{1, 1, 1, 1}, []netip.AddrPort{b1, b2, b1, b2}},
		{"size-break", []netip.AddrPort{b1, b1, b1, b2}, []int{60, 100, 100, 100}, []int{1, 2, 1}, []netip.AddrPort{b1, b1, b2}},
	}
	on := gsoShared(time.Now)
	for _, c := range cases {
		s := newSendState(len(c.eps), on)
		bufs := make([][]byte, len(c.eps))
		for i := range bufs {
			bufs[i] = make([]byte, c.sizes[i])
			n, err := encodeSockaddr(&s.names[i], c.eps[i], false)
			if err != nil {
				t.Fatal(err)
			}
			s.nlens[i] = n
		}
		s.prepareMany(bufs, c.eps, nil)
		var got []int
		var to []netip.AddrPort
		for m := range s.n {
			h := &s.hdrs[m].Hdr
			got = append(got, int(h.Iovlen))
			to = append(to, decodeSockaddr((*sockaddr)(unsafe.Pointer(h.Name))))
			if h.Namelen != unix.SizeofSockaddrInet4 || (h.Iovlen > 1) != (h.Controllen != 0) {
				t.Errorf("%s: message %d: name length %d, %d datagrams, control %d", c.name, m, h.Namelen, h.Iovlen, h.Controllen)
			}
		}
		if !slices.Equal(got, c.want) || !slices.Equal(to, c.to) {
			t.Errorf("%s: messages %v to %v, want %v to %v", c.name, got, to, c.want, c.to)
		}
		s.releaseMany()
		if s.hdrs[0].Hdr.Name != (*byte)(unsafe.Pointer(&s.name)) || s.eps != nil {
			t.Errorf("%s: releaseMany left the messages on SendMany's names", c.name)
		}
	}
}

// TestSendManyGSO: over loopback, runs of a SendMany to two GRO receivers
// arrive coalesced, each datagram intact and in order per receiver.
func TestSendManyGSO(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	c := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	needOffloads(t, a)
	needOffloads(t, b)
	watchdog(t, b)
	watchdog(t, c)
	out := numbered(48, 1200, 300)
	eps := make([]netip.AddrPort, len(out))
	var toB, toC [][]byte
	for i := range out {
		// Runs of eight to each, the last to c shorter.
		if i/8%2 == 0 {
			eps[i] = b.LocalAddr()
			toB = append(toB, out[i])
		} else {
			eps[i] = c.LocalAddr()
			toC = append(toC, out[i])
		}
	}
	if err := a.SendMany(out, eps); err != nil {
		t.Fatal(err)
	}
	for _, r := range []struct {
		b    *LinuxBind
		want [][]byte
	}{{b, toB}, {c, toC}} {
		in := newBatch(len(r.want), 1500)
		if err := receiveN(r.b, in, len(r.want)); err != nil {
			t.Fatal(err)
		}
		expect(t, in, r.want, a.LocalAddr())
		if r.b.groRecv.coalesced == 0 {
			t.Errorf("%v: no run arrived coalesced", r.b.LocalAddr())
		}
	}
	if !a.GSO() {
		t.Error("GSO switched off")
	}
}

// TestSendManyGSOFallback: when the kernel refuses a segmented run of a
// SendMany, every datagram still reaches its own endpoint, in order, and
// GSO stays on under a segment cap.
func TestSendManyGSOFallback(t *testing.T) {
	lowMTULoopback(t)
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	c := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	if !a.GSO() {
		t.Skip("no GSO to fall back from")
	}
	watchdog(t, b)
	watchdog(t, c)
	out := numbered(24, 1400, 1400)
	eps := make([]netip.AddrPort, len(out))
	var toB, toC [][]byte
	for i := range out {
		if i < 10 || i >= 20 {
			eps[i] = b.LocalAddr()
			toB = append(toB, out[i])
		} else {
			eps[i] = c.LocalAddr()
			toC = append(toC, out[i])
		}
	}
	if err := a.SendMany(out, eps); err != nil {
		t.Fatal(err)
	}
	if !a.GSO() || a.tx.gso.limit.Load() == nil {
		t.Fatalf("after the kernel refused a segment: GSO %v, cap %+v", a.GSO(), a.tx.gso.limit.Load())
	}
	for _, r := range []struct {
		b    *LinuxBind
		want [][]byte
	}{{b, toB}, {c, toC}} {
		in := newBatch(len(r.want), 2048)
		if err := receiveN(r.b, in, len(r.want)); err != nil {
			t.Fatal(err)
		}
		expect(t, in, r.want, a.LocalAddr())
	}
}
