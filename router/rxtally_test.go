package router

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestRxTally: counts reach each peer's counters whatever the order of
// peers in a batch, and nothing is added before flush.
func TestRxTally(t *testing.T) {
	p, q := &Peer{}, &Peer{}
	var tl rxTally
	for _, s := range []struct {
		p     *Peer
		bytes int // 0: a keepalive or control message, nothing delivered
	}{{p, 100}, {p, 0}, {q, 7}, {p, 50}, {q, 3}, {q, 0}} {
		tl.packet(s.p)
		if s.bytes > 0 {
			tl.delivered(s.bytes)
		}
	}
	// Every run but q's last is flushed when the peer changes.
	if got := [4]uint64{p.rxPackets.Load(), p.rxBytes.Load(), q.rxPackets.Load(), q.rxBytes.Load()}; got != [4]uint64{3, 150, 1, 7} {
		t.Fatalf("before flush: %v", got)
	}
	tl.flush()
	tl.flush() // twice is harmless
	if got := [4]uint64{p.rxPackets.Load(), p.rxBytes.Load(), q.rxPackets.Load(), q.rxBytes.Load()}; got != [4]uint64{3, 150, 3, 10} {
		t.Fatalf("after flush: %v", got)
	}
}

// TestReceiveBatchCountsPeer: a batch of transport messages adds its
// packets and inner bytes to the peer's counters once it is handled.
func TestReceiveBatchCountsPeer(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	pkt := udpPacket(t, podA, podB, make([]byte, 300))
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	const n = 5
	for i := range n {
		h.a.routeBatch(refill(in, pkt), 1, h.now)
		out.sizes[i] = copy(out.bufs[i], h.bindA.last[:h.bindA.n])
		out.eps[i] = h.bindA.local
	}
	var pb *Peer
	for _, p := range h.b.state.Load().peers {
		pb = p
	}
	before := pb.Stats()
	h.b.receiveBatch(out, n, h.now)
	after := pb.Stats()
	if got := after.RxPackets - before.RxPackets; got != n {
		t.Errorf("RxPackets +%d, want %d", got, n)
	}
	if got := after.RxBytes - before.RxBytes; got != n*uint64(len(pkt)) {
		t.Errorf("RxBytes +%d, want %d", got, n*len(pkt))
	}
	if h.tunB.written != n {
		t.Errorf("%d packets written, want %d", h.tunB.written, n)
	}
}
