package router

import (
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// sizeBind records the size of every datagram sent, in order, in a slice
// allocated once.
type sizeBind struct {
	captureBind
	sizes []int
}

func (b *sizeBind) Send(bufs [][]byte, _ netip.AddrPort) error {
	for _, m := range bufs {
		if len(b.sizes) < cap(b.sizes) {
			b.sizes = append(b.sizes, len(m))
		}
		b.n = copy(b.last, m)
	}
	b.sent += len(bufs)
	return nil
}

// feed puts pkts into the pipe the way the reader does after a read.
func feed(tb testing.TB, r *Router, p *fqPipe, pkts ...[]byte) {
	tb.Helper()
	for len(pkts) > 0 {
		k := r.take(p, len(p.rslots))
		n := min(k, len(pkts))
		for i := range n {
			p.rsizes[i] = copy(p.rbufs[i][bufHeadroom:], pkts[i])
		}
		now := r.clock.Now()
		r.enqueueRead(p, n, k, now)
		r.sealSparse(p, now)
		pkts = pkts[n:]
	}
}

func newFQHotPair(t *testing.T) (*hotPair, *sizeBind, *fqPipe) {
	t.Helper()
	h := newHotPair(t, bhcrypto.AESGCM)
	sb := &sizeBind{captureBind: *h.bindA, sizes: make([]int, 0, 4096)}
	h.a.bind = sb
	h.a.lanes[0].bind = sb
	p, err := h.a.newFQPipe(h.a.lanes[0])
	if err != nil {
		t.Fatal(err)
	}
	p.sparse = nil // these tests are about the queue: no express packets
	return h, sb, p
}

// A small packet read after a bulk backlog leaves in the first batch, not
// behind the backlog; the bulk flow keeps its order; every slot comes back.
func TestFQSmallFlowOvertakes(t *testing.T) {
	h, sb, p := newFQHotPair(t)
	var bulk [][]byte
	for i := range 300 {
		bulk = append(bulk, flowPacket(t, 1, i))
		bulk[i] = append(bulk[i], make([]byte, 1000)...)
		fixIPv4Length(bulk[i])
	}
	feed(t, h.a, p, bulk...)
	// A flow in another bucket than the bulk one (flow hashes are
	// seeded per router: one in Flows could share it).
	mask := uint64(p.q.Config().Flows - 1)
	small := flowPacket(t, 2, 0)
	for f := 3; testHash(h.a.flows, small)&mask == testHash(h.a.flows, bulk[0])&mask; f++ {
		small = flowPacket(t, f, 0)
	}
	feed(t, h.a, p, small)
	h.a.sealFQ(p)
	if len(sb.sizes) != 301 {
		t.Fatalf("%d datagrams sent, want 301; drops %+v", len(sb.sizes), h.a.drops.snapshot())
	}
	at := -1
	for i, n := range sb.sizes {
		if n < 200 {
			at = i
		}
	}
	if at < 0 || at >= sealBatch {
		t.Errorf("small packet sent as datagram %d of 301, want within the first batch (%d)", at, sealBatch)
	}
	if len(p.free) != len(p.pool) || p.q.Len() != 0 {
		t.Errorf("%d of %d slots free, %d queued", len(p.free), len(p.pool), p.q.Len())
	}
}

// fixIPv4Length rewrites the IPv4 total length (and header checksum) of a
// packet whose payload was extended; the UDP length is left as it is.
func fixIPv4Length(pkt []byte) {
	pkt[2], pkt[3] = byte(len(pkt)>>8), byte(len(pkt))
	pkt[10], pkt[11] = 0, 0
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(pkt[i])<<8 | uint32(pkt[i+1])
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	c := ^uint16(sum)
	pkt[10], pkt[11] = byte(c>>8), byte(c)
}

// When the pool is full the reader still gets a whole read's slots: the
// fullest flow loses packets from its head, counted as fq_overflow.
func TestFQOverflowKeepsReading(t *testing.T) {
	h, _, p := newFQHotPair(t)
	pkt := flowPacket(t, 1, 0)
	bulk := make([][]byte, len(p.pool))
	for i := range bulk {
		bulk[i] = pkt
	}
	feed(t, h.a, p, bulk...)
	h.a.clock.(*fakeClock).Advance(time.Second) // the queued packets are old now
	if k := h.a.take(p, len(p.rslots)); k != len(p.rslots) {
		t.Fatalf("take gave %d slots, want %d", k, len(p.rslots))
	}
	if got := h.a.drops.Get(Inside, ReasonFQOverflow); got == 0 {
		t.Errorf("no fq_overflow drops")
	}
	r := p.rslots[:len(p.rslots)]
	p.give(r)
	h.a.sealFQ(p)
	if len(p.free) != len(p.pool) {
		t.Errorf("%d of %d slots free", len(p.free), len(p.pool))
	}
}

// The fair-queue inside path (the reader's enqueue, the sealer's batch,
// seal, send, slots back) allocates nothing per packet.
func TestFQPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h, sb, p := newFQHotPair(t)
	pkts := [][]byte{flowPacket(t, 1, 0), flowPacket(t, 2, 0), flowPacket(t, 1, 1), flowPacket(t, 3, 0)}
	sent := sb.sent
	run := func() {
		feed(t, h.a, p, pkts...)
		h.a.sealFQ(p)
	}
	if n := testing.AllocsPerRun(500, run); n != 0 {
		t.Errorf("%.1f allocations per run of 4 packets, want 0", n)
	}
	if got := sb.sent - sent; got < 4*500 {
		t.Errorf("%d datagrams sent, want at least %d", got, 4*500)
	}
}

// A reader waiting in take for slots is woken when the sealer frees them
// by dropping, not only by sending: here every queued packet has waited
// past the fair queue's time bound, so the sealer's pass drops them all
// (fq_expired) and sends nothing. Before, the drops freed the slots
// without a signal and the reader slept on with a free pool: the TUN was
// no longer read until something else gave slots back (nothing did).
func TestFQReaderWokenByDrops(t *testing.T) {
	h, _, p := newFQHotPair(t)
	pkt := flowPacket(t, 1, 0)
	bulk := make([][]byte, len(p.pool))
	for i := range bulk {
		bulk[i] = pkt
	}
	feed(t, h.a, p, bulk...) // the pool is full of young packets
	for len(p.wake) > 0 {
		<-p.wake
	}
	took := make(chan int, 1)
	go func() { took <- h.a.take(p, len(p.rslots)) }()
	// take signals the sealer with p.mu held and holds it until Wait:
	// once the signal is here and p.mu is free, the reader sleeps.
	<-p.wake
	p.mu.Lock()
	p.mu.Unlock()
	h.a.clock.(*fakeClock).Advance(time.Second) // past MaxDelay (100 ms)
	h.a.sealFQ(p)
	if got := h.a.drops.Get(Inside, ReasonFQExpired); got != uint64(len(p.pool)) {
		t.Fatalf("%d packets dropped as expired, want all %d", got, len(p.pool))
	}
	select {
	case k := <-took:
		if k != len(p.rslots) {
			t.Fatalf("take gave %d slots, want %d", k, len(p.rslots))
		}
	case <-time.After(5 * time.Second):
		p.freed.Broadcast() // let the reader go; the test has failed
		<-took
		t.Fatal("the reader still waits for slots 5 s after the sealer freed the whole pool by dropping")
	}
}

// flowBind is a captureBind that is a FlowSender: it counts the datagrams
// sent through SendFlows.
type flowBind struct {
	captureBind
	flowSent int
}

func (b *flowBind) SendFlows(bufs [][]byte, flows []uint64, _ netip.AddrPort) error {
	if len(flows) != len(bufs) {
		panic("SendFlows: one flow hash per datagram")
	}
	b.flowSent += len(bufs)
	return nil
}

// A lane whose bind is a FlowSender (the relay path) gets its datagrams
// through SendFlows; the run learns that once, when it is made, and the
// flush allocates nothing.
func TestSealRunFlowSender(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	fb := &flowBind{captureBind: *h.bindA}
	h.a.bind = fb
	h.a.lanes[0].bind = fb
	p, err := h.a.newFQPipe(h.a.lanes[0])
	if err != nil {
		t.Fatal(err)
	}
	if p.run.flowSend != FlowSender(fb) {
		t.Fatalf("run's flowSend = %v, want the lane's bind", p.run.flowSend)
	}
	pkts := [][]byte{flowPacket(t, 1, 0), flowPacket(t, 2, 0)}
	if n := testing.AllocsPerRun(200, func() {
		feed(t, h.a, p, pkts...)
		h.a.sealFQ(p)
	}); n != 0 {
		t.Errorf("%.1f allocations per run of 2 packets, want 0", n)
	}
	if fb.flowSent < 2*200 || fb.sent != 0 {
		t.Errorf("SendFlows carried %d datagrams and Send %d; want >= %d and 0", fb.flowSent, fb.sent, 2*200)
	}
	if run := newSealRun(h.bindA, 4); run.flowSend != nil {
		t.Errorf("a plain bind's run has flowSend %v", run.flowSend)
	}
}
