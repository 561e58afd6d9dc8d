package router

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// TestExpressSocketPoliced: the express outside loop (real-time with
// ExpressPriority) handles itself only transport messages with the
// express lane byte, at most ExpressBurst at once and ExpressRate a
// second; everything else that reaches the express socket (a handshake,
// a lane-0 or lane-1 transport message hashed there, express datagrams
// over budget) goes, in order, to the spill loop on an ordinary
// goroutine, and when that is behind it is dropped and counted, never
// handled at real-time priority.
func TestExpressSocketPoliced(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	l := &lane{tun: &h.b.tun, bind: newCaptureBind("192.0.2.2:51821"), health: new(loopHealth), index: -1}
	h.b.express.lane = l
	g := h.b.newExpressGuard(l)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	kpA := peerB.current.Load()
	seal := func(lane byte) []byte {
		t.Helper()
		pkt := udpPacket(t, podA, podB, []byte("ping"))
		buf := make([]byte, bhcrypto.TransportOverhead+len(pkt)+bhcrypto.PaddingMultiple)
		copy(buf[bhcrypto.TransportHeaderSize:], pkt)
		m, err := kpA.SealLane(buf, len(pkt), lane)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	h.a.hs.initiate(peerB, h.now, false)
	initiation := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	out := h.b.newOutsideBatch()
	out.lane = l
	put := func(i int, msg []byte) {
		out.sizes[i] = copy(out.bufs[i][:cap(out.bufs[i])], msg)
		out.eps[i] = h.bindA.local
	}
	put(0, initiation)
	put(1, seal(0))
	put(2, seal(udp.ExpressLane))
	put(3, seal(1))
	if kept := h.b.expressSort(g, out, 4, h.now); kept != 1 || out.bufs[0][0] != bhcrypto.MsgTransport || out.bufs[0][1] != udp.ExpressLane {
		t.Fatalf("the express loop keeps %d datagrams, the first of type %d lane %d; want only the express one", kept, out.bufs[0][0], out.bufs[0][1])
	}
	w := <-g.queue
	if w.n != 3 || w.b.bufs[0][0] != bhcrypto.MsgInitiation || w.b.bufs[1][1] != 0 || w.b.bufs[2][1] != 1 {
		t.Fatalf("spilled %d datagrams, want the other 3 in order", w.n)
	}
	g.free <- w.b

	// Over budget at one instant: ExpressBurst kept, the rest spilled.
	g = h.b.newExpressGuard(l)
	express := seal(udp.ExpressLane)
	kept, total := 0, ExpressBurst+10
	for sent := 0; sent < total; {
		n := min(len(out.bufs), total-sent)
		for i := range n {
			put(i, express)
		}
		kept += h.b.expressSort(g, out, n, h.now)
		select {
		case w := <-g.queue:
			g.free <- w.b
		default:
		}
		sent += n
	}
	if policed := h.b.express.count.policed.Load(); kept != ExpressBurst || policed != 10 {
		t.Fatalf("at one instant: kept %d, policed %d; want %d and 10", kept, policed, ExpressBurst)
	}
	// The bucket refills at ExpressRate.
	later := h.now.Add(100 * time.Millisecond)
	put(0, express)
	if h.b.expressSort(g, out, 1, later) != 1 {
		t.Fatal("the bucket did not refill")
	}

	// The spill loop behind (no free batch): dropped and counted.
	var held []*outsideBatch
	for range expressSpillBatches {
		held = append(held, <-g.free)
	}
	put(0, initiation)
	put(1, seal(0))
	if kept := h.b.expressSort(g, out, 2, later); kept != 0 {
		t.Fatalf("kept %d with the spill loop behind", kept)
	}
	if d := h.b.drops.Get(Outside, ReasonExpressOverflow); d != 2 {
		t.Fatalf("express_overflow %d, want 2", d)
	}
	for _, b := range held {
		g.free <- b
	}

	// Sorting allocates nothing, spilling or not.
	allocs := testing.AllocsPerRun(100, func() {
		put(0, express)
		put(1, initiation)
		h.b.expressSort(g, out, 2, later)
		w := <-g.queue
		g.free <- w.b
	})
	if allocs != 0 {
		t.Fatalf("expressSort allocates %.1f times per batch", allocs)
	}
}

// TestExpressSpillDelivers: what the express loop spills is handled by
// the spill loop as by any outside loop: a lane-0 transport message that
// reached the express socket is delivered, not lost.
func TestExpressSpillDelivers(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	l := &lane{tun: &h.b.tun, bind: newCaptureBind("192.0.2.2:51821"), health: new(loopHealth), index: -1}
	h.b.express.lane = l
	g := h.b.expressGuardFor(l)
	in := h.a.newInsideBatch()
	h.a.routeBatch(refill(in, udpPacket(t, podA, podB, []byte("x"))), 1, h.now)
	out := h.b.newOutsideBatch()
	out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
	out.eps[0] = h.bindA.local
	rx := h.b.state.Load().peers[h.a.keys.Load().Current.Public].rxPackets.Load()
	if kept := h.b.expressSort(g, out, 1, h.now); kept != 0 {
		t.Fatalf("kept %d lane-0 datagrams on the express loop", kept)
	}
	g.stop()
	if got := h.b.state.Load().peers[h.a.keys.Load().Current.Public].rxPackets.Load(); got != rx+1 {
		t.Fatalf("the spilled datagram was not received: rx %d -> %d, drops %+v", rx, got, h.b.drops.snapshot())
	}
}

// relayBind is an express socket's bind that defers relay messages
// (as transit.Bind does) and counts what it was asked to process.
type relayBind struct {
	*captureBind
	deferred  bool
	processed chan int
}

func (b *relayBind) DeferRelay() { b.deferred = true }
func (b *relayBind) Process(bufs [][]byte, sizes []int, eps []netip.AddrPort, n int) int {
	b.processed <- n
	return 0
}

// TestExpressDefersRelay: on the express socket, relay messages (there
// only by the kernel's hash) are left unread by the bind on the
// real-time loop and processed on the spill loop.
func TestExpressDefersRelay(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	bind := &relayBind{captureBind: newCaptureBind("192.0.2.2:51821"), processed: make(chan int, 1)}
	l := &lane{tun: &h.b.tun, bind: bind, health: new(loopHealth), index: -1}
	h.b.express.lane = l
	g := h.b.expressGuardFor(l)
	if !bind.deferred {
		t.Fatal("the express bind was not told to defer relay messages")
	}
	out := h.b.newOutsideBatch()
	relayMsg := make([]byte, bhcrypto.RelayOverhead+bhcrypto.TransportOverhead)
	relayMsg[0] = bhcrypto.MsgRelay
	out.sizes[0] = copy(out.bufs[0][:cap(out.bufs[0])], relayMsg)
	out.eps[0] = h.bindA.local
	if kept := h.b.expressSort(g, out, 1, h.now); kept != 0 {
		t.Fatalf("the real-time loop kept a relay message")
	}
	g.stop()
	select {
	case n := <-bind.processed:
		if n != 1 {
			t.Fatalf("processed %d, want the relay message", n)
		}
	default:
		t.Fatal("the spill loop did not have the relay message processed")
	}
}

// TestExpressSpillMetrics: what the express socket's real-time loop
// leaves to the spill loop is exported as bridgehead_express_spilled_total,
// and the express transport messages among them that were over budget as
// bridgehead_express_policed_total, both from zero; they count across the
// lifetimes of the loop's guards (a lane restarts its loop with a new one).
func TestExpressSpillMetrics(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	l := &lane{tun: &h.b.tun, bind: newCaptureBind("192.0.2.2:51821"), health: new(loopHealth), index: -1}
	h.b.express.lane = l
	for _, series := range []string{"bridgehead_express_spilled_total 0", "bridgehead_express_policed_total 0"} {
		if !strings.Contains(scrape(t, h.b), series+"\n") {
			t.Errorf("scrape lacks %s", series)
		}
	}
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	kpA := peerB.current.Load()
	seal := func(lane byte) []byte {
		t.Helper()
		pkt := udpPacket(t, podA, podB, []byte("ping"))
		buf := make([]byte, bhcrypto.TransportOverhead+len(pkt)+bhcrypto.PaddingMultiple)
		copy(buf[bhcrypto.TransportHeaderSize:], pkt)
		m, err := kpA.SealLane(buf, len(pkt), lane)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	out := h.b.newOutsideBatch()
	out.lane = l
	put := func(i int, msg []byte) {
		out.sizes[i] = copy(out.bufs[i][:cap(out.bufs[i])], msg)
		out.eps[i] = h.bindA.local
	}
	for range 2 { // two guards, as after a restarted loop
		g := h.b.newExpressGuard(l)
		put(0, seal(0))
		put(1, seal(udp.ExpressLane))
		put(2, seal(udp.ExpressLane))
		g.tokens, g.last = 1, h.b.mono.ns(h.now) // room for one express datagram
		if kept := h.b.expressSort(g, out, 3, h.now); kept != 1 {
			t.Fatalf("kept %d, want 1", kept)
		}
		w := <-g.queue
		g.free <- w.b
	}
	scr := scrape(t, h.b)
	for _, series := range []string{"bridgehead_express_spilled_total 4", "bridgehead_express_policed_total 2"} {
		if !strings.Contains(scr, series+"\n") {
			t.Errorf("scrape lacks %s", series)
		}
	}
}
