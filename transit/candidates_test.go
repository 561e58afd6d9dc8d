package transit

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
)

func candAddr(i int) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, byte(i >> 8), byte(i)}), 40000)
}

// TestFromCandidate: a datagram's source names the gateway whose mapping
// it is; a gateway that moved is found at its new address only; two
// gateways claiming one address resolve to the lower (as the scan did).
func TestFromCandidate(t *testing.T) {
	v := &view{direct: make([]directState, 8)}
	if gw, ok := v.fromCandidate(candAddr(1)); ok {
		t.Fatalf("no candidates yet, got gateway %d", gw)
	}
	v.setCandidate(3, candAddr(1))
	v.setCandidate(5, candAddr(2))
	v.setCandidate(-1, candAddr(9)) // out of range: ignored
	v.setCandidate(8, candAddr(9))
	v.setCandidate(6, netip.AddrPort{}) // invalid: ignored
	v.setCandidate(5, candAddr(4))      // gateway 5 roamed
	v.setCandidate(7, candAddr(1))      // claims gateway 3's address
	for _, c := range []struct {
		addr netip.AddrPort
		gw   GatewayID
		ok   bool
	}{
		{candAddr(1), 3, true},
		{candAddr(2), None, false},
		{candAddr(4), 5, true},
		{candAddr(9), None, false},
		{netip.AddrPort{}, None, false},
	} {
		gw, ok := v.fromCandidate(c.addr)
		if gw != c.gw || ok != c.ok {
			t.Errorf("fromCandidate(%v) = %d, %v; want %d, %v", c.addr, gw, ok, c.gw, c.ok)
		}
	}
	if n := testing.AllocsPerRun(100, func() { v.fromCandidate(candAddr(4)) }); n != 0 {
		t.Errorf("fromCandidate allocates %v times", n)
	}
}

// TestFromCandidateConcurrent: lanes set candidates while others look
// them up (-race), and every gateway ends at its last address.
func TestFromCandidateConcurrent(t *testing.T) {
	const gws = 64
	v := &view{direct: make([]directState, gws)}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := range 50 {
				for g := w; g < gws; g += 4 {
					v.setCandidate(GatewayID(g), candAddr(round*gws+g))
					v.fromCandidate(candAddr(g))
				}
			}
		}()
	}
	wg.Wait()
	for g := range gws {
		if gw, ok := v.fromCandidate(candAddr(49*gws + g)); !ok || gw != GatewayID(g) {
			t.Fatalf("gateway %d: fromCandidate of its last address = %d, %v", g, gw, ok)
		}
	}
}

// BenchmarkFromCandidate: the lookup Receive makes for every datagram
// once a hint arrived, by catalog size (gateways), for a source that is
// no candidate (a gateway with an endpoint: the common case).
func BenchmarkFromCandidate(b *testing.B) {
	for _, n := range []int{2, 600, 3000} {
		b.Run(fmt.Sprintf("gateways=%d", n), func(b *testing.B) {
			v := &view{direct: make([]directState, n)}
			for g := range n / 2 {
				v.setCandidate(GatewayID(g), candAddr(g))
			}
			miss := netip.MustParseAddrPort("203.0.113.1:51820")
			b.ReportAllocs()
			for b.Loop() {
				v.fromCandidate(miss)
			}
		})
	}
}
