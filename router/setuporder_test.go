package router

import (
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// blockFirstBind records the counters of the transport messages it sends,
// in the order the sends complete; once armed, the first Send blocks until
// release is closed. Safe for concurrent use.
type blockFirstBind struct {
	local    netip.AddrPort
	armed    bool // set before use
	blocked  chan struct{}
	release  chan struct{}
	mu       sync.Mutex
	calls    int
	counters []uint64
}

func newBlockFirstBind(local netip.AddrPort) *blockFirstBind {
	return &blockFirstBind{local: local, armed: true, blocked: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockFirstBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) { return 0, nil }
func (b *blockFirstBind) Send(bufs [][]byte, _ netip.AddrPort) error {
	b.mu.Lock()
	b.calls++
	first := b.calls == 1 && b.armed
	b.mu.Unlock()
	if first {
		close(b.blocked)
		<-b.release
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range bufs {
		if _, c, ok := bhcrypto.ParseTransportHeader(m); ok {
			b.counters = append(b.counters, c)
		}
	}
	return nil
}
func (b *blockFirstBind) BatchSize() int            { return 64 }
func (b *blockFirstBind) LocalAddr() netip.AddrPort { return b.local }
func (b *blockFirstBind) Close() error              { return nil }

// TestSessionSetupKeepsOrder: packets queued while a session is set up
// leave before packets routed after it is established, even when sending
// the queue is slow (issue #19, item 9). The send of the first queued
// packet blocks; a packet routed meanwhile must wait behind the queue
// instead of overtaking it on the fresh session.
func TestSessionSetupKeepsOrder(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	a := h.a
	pa := a.state.Load().sites["site-b"].gateways[0]
	pa.current.Store(nil) // no session yet: packets queue
	pkt := udpPacket(t, podA, podB, make([]byte, 100))
	in := a.newInsideBatch()
	route := func() {
		copy(in.bufs[0][bufHeadroom:], pkt)
		in.sizes[0] = len(pkt)
		a.routeBatch(in, 1, h.now)
	}
	const queued = 3
	for range queued {
		route()
	}
	if n := pa.queue.Len(); n != queued {
		t.Fatalf("%d packets queued, want %d", n, queued)
	}
	// The handshake, by hand: A initiates, B answers.
	scratch := make([]byte, a.set.bufSize)
	a.hs.initiate(pa, h.now, false)
	init := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	h.b.hs.handle(init, h.bindA.local, h.now, make([]byte, h.b.set.bufSize))
	resp := append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	if resp[0] != bhcrypto.MsgResponse {
		t.Fatalf("B sent message type %d, want a response", resp[0])
	}

	bind := newBlockFirstBind(h.bindA.local)
	a.bind = bind
	loopDone := make(chan struct{})
	go func() { // the handshake loop: establish, then flush the queue
		defer close(loopDone)
		a.hs.handle(resp, h.bindB.local, h.now, scratch)
	}()
	select {
	case <-bind.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the queue was not flushed")
	}
	routeDone := make(chan struct{})
	go func() { // the inside path: a new packet while the flush is stuck
		defer close(routeDone)
		route()
	}()
	select {
	case <-routeDone:
	case <-time.After(300 * time.Millisecond): // held behind the queue
	}
	close(bind.release)
	<-loopDone
	<-routeDone
	a.hs.onTrigger(pa, h.now, scratch) // what the loop does with the trigger
	bind.mu.Lock()
	got := slices.Clone(bind.counters)
	bind.mu.Unlock()
	t.Logf("counters in send order: %v", got)
	if len(got) != queued+1 {
		t.Fatalf("%d packets sent, want %d: %v", len(got), queued+1, got)
	}
	if !slices.IsSorted(got) {
		t.Errorf("packets left out of order: counters %v", got)
	}
}

// TestResponderConfirmKeepsOrder: the responder's side of the same race.
// Packets B queued while it had no session leave before packets routed
// after the initiator's first message confirmed the session B answered
// (issue #19, item 9).
func TestResponderConfirmKeepsOrder(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	a, b := h.a, h.b
	pa := a.state.Load().sites["site-b"].gateways[0]
	pb := b.state.Load().sites["site-a"].gateways[0]
	pa.current.Store(nil)
	pb.current.Store(nil)
	pkt := udpPacket(t, podB, podA, make([]byte, 100))
	in := b.newInsideBatch()
	route := func() {
		copy(in.bufs[0][bufHeadroom:], pkt)
		in.sizes[0] = len(pkt)
		b.routeBatch(in, 1, h.now)
	}
	const queued = 3
	for range queued {
		route()
	}
	// A initiates, B answers, A completes and sends its first message
	// (a keepalive: A has nothing queued), which B takes as confirmation.
	a.hs.initiate(pa, h.now, false)
	init := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	b.hs.handle(init, h.bindA.local, h.now, make([]byte, b.set.bufSize))
	resp := append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	a.hs.handle(resp, h.bindB.local, h.now, make([]byte, a.set.bufSize))
	out := b.newOutsideBatch()
	out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
	out.eps[0] = h.bindA.local
	b.receiveBatch(out, 1, h.now)
	if pb.current.Load() == nil {
		t.Fatal("B did not confirm the session")
	}

	bind := newBlockFirstBind(h.bindB.local)
	b.bind = bind
	scratch := make([]byte, b.set.bufSize)
	loopDone := make(chan struct{})
	go func() { // the handshake loop, woken by confirm: flush the queue
		defer close(loopDone)
		b.hs.onTrigger(pb, h.now, scratch)
	}()
	select {
	case <-bind.blocked:
	case <-time.After(5 * time.Second):
		t.Fatal("the queue was not flushed")
	}
	routeDone := make(chan struct{})
	go func() {
		defer close(routeDone)
		route()
	}()
	select {
	case <-routeDone:
	case <-time.After(300 * time.Millisecond):
	}
	close(bind.release)
	<-loopDone
	<-routeDone
	b.hs.onTrigger(pb, h.now, scratch)
	bind.mu.Lock()
	got := slices.Clone(bind.counters)
	bind.mu.Unlock()
	t.Logf("counters in send order: %v", got)
	if len(got) != queued+1 {
		t.Fatalf("%d packets sent, want %d: %v", len(got), queued+1, got)
	}
	if !slices.IsSorted(got) {
		t.Errorf("packets left out of order: counters %v", got)
	}
}
