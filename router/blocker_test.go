package router

import (
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
)

// TestSourceBlockerPart drives sourceBlocker alone with a recordingFilter:
// a source over BadMACRate is blocked once for BlockBadMACFor, a peer's
// address never (whatever the port), at most maxBlocksPerSecond new
// blocks a second, nothing without a filter, and an expired block is
// forgotten by gc so a source still flooding is blocked again.
func TestSourceBlockerPart(t *testing.T) {
	clock := newFakeClock()
	peerEP := netip.MustParseAddrPort("192.0.2.1:51820")
	var state atomic.Pointer[routingState]
	state.Store(&routingState{byEndpoint: map[netip.AddrPort]*Peer{peerEP: {}}})
	newPart := func(f KernelFilter) *sourceBlocker {
		k := newKernelFilter(f, slog.New(slog.DiscardHandler), &Drops{}, func(uint32) bool { return true })
		return newSourceBlocker(k, &state, clock.Now, slog.New(slog.DiscardHandler))
	}
	flood := func(b *sourceBlocker, from netip.AddrPort, n int) {
		for range n {
			b.note(from)
		}
	}
	src := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}), 4000)
	}

	f := newRecordingFilter()
	b := newPart(f)
	flood(b, src(1), BadMACBurst)
	if len(f.blocked) != 0 {
		t.Fatalf("blocked within the burst: %v", f.blocked)
	}
	flood(b, src(1), 50)
	flood(b, netip.AddrPortFrom(peerEP.Addr(), 9999), BadMACBurst+50)
	if len(f.blocked) != 1 || f.blocked[src(1).Addr()] != BlockBadMACFor {
		t.Fatalf("blocked %v, want only %s once", f.blocked, src(1).Addr())
	}

	// The budget: maxBlocksPerSecond new blocks, then none this second.
	for i := 2; i < 2+2*maxBlocksPerSecond; i++ {
		flood(b, src(i), BadMACBurst+1)
	}
	if got := len(f.blocked); got != maxBlocksPerSecond {
		t.Errorf("%d sources blocked in one second, want %d", got, maxBlocksPerSecond)
	}

	clock.Advance(BlockBadMACFor)
	b.gc(clock.Now())
	b.mu.Lock()
	left := len(b.until)
	b.mu.Unlock()
	if left != 0 {
		t.Errorf("%d expired blocks kept after gc", left)
	}
	flood(b, src(1), BadMACBurst+1)
	if f.blocked[src(1).Addr()] != 2*BlockBadMACFor {
		t.Errorf("after expiry: blocked for %s in total, want %s", f.blocked[src(1).Addr()], 2*BlockBadMACFor)
	}

	none := newPart(nil)
	flood(none, src(1), 2*BadMACBurst)
	if n := none.badMAC.Len(); n != 0 {
		t.Errorf("without a filter the bad-MAC limiter tracks %d sources, want 0", n)
	}
}
