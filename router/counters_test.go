package router

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestRouteReservesCounters: a batch sealed for one peer takes exactly
// its packets' counters from the session (one reservation, no gap), and a
// reservation does not outlive its batch: two batches of 3 use 6.
func TestRouteReservesCounters(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	var kp *bhcrypto.Keypair
	for _, p := range h.a.state.Load().peers {
		kp = p.current.Load()
	}
	if kp == nil {
		t.Fatal("no session")
	}
	pkt := udpPacket(t, podA, podB, make([]byte, 200))
	in := h.a.newInsideBatch()
	send := func(n int) uint64 {
		before := kp.SendCount()
		for i := range n {
			copy(in.bufs[i][bufHeadroom:], pkt)
			in.sizes[i] = len(pkt)
		}
		h.a.routeBatch(in, n, h.now)
		return kp.SendCount() - before
	}
	for _, tc := range []struct{ n, want int }{{10, 10}, {3, 3}, {3, 3}, {1, 1}} {
		if got := send(tc.n); got != uint64(tc.want) {
			t.Errorf("batch of %d used %d counters, want %d", tc.n, got, tc.want)
		}
	}
	if drops := h.a.drops.snapshot(); drops != ([numDirections][numReasons]uint64{}) {
		t.Fatalf("drops: %+v", drops)
	}
}

// TestCounterBlock: take hands out consecutive counters of one
// reservation and reserves again for another keypair.
func TestCounterBlock(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	var kpA, kpB *bhcrypto.Keypair
	for _, p := range h.a.state.Load().peers {
		kpA = p.current.Load()
	}
	for _, p := range h.b.state.Load().peers {
		kpB = p.current.Load()
	}
	var c counterBlock
	for i := range uint64(3) {
		if n, ok := c.take(kpA, 3); !ok || n != i {
			t.Fatalf("take %d: %d %v", i, n, ok)
		}
	}
	if kpA.SendCount() != 3 {
		t.Fatalf("SendCount %d after one reservation of 3", kpA.SendCount())
	}
	if n, ok := c.take(kpA, 2); !ok || n != 3 || kpA.SendCount() != 5 {
		t.Fatalf("empty block: %d %v, SendCount %d", n, ok, kpA.SendCount())
	}
	if n, ok := c.take(kpB, 100); !ok || n != 0 || kpB.SendCount() != maxCounterBlock {
		t.Fatalf("other keypair: %d %v, SendCount %d (want the reservation capped at %d)", n, ok, kpB.SendCount(), maxCounterBlock)
	}
}
