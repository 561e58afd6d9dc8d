package router

import (
	"encoding/binary"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// pacedPair is a hot pair whose A has spent its handshake pace, with a
// stand-in for A's handshake loop (loop) that counts how often the data
// path woke it.
type pacedPair struct {
	*hotPair
	clock   *fakeClock
	peer    *Peer // A's peer B
	in      *insideBatch
	pkt     []byte
	scratch []byte
	wakes   int
}

func newPacedPair(t *testing.T, age time.Duration) *pacedPair {
	t.Helper()
	clock := newFakeClock()
	h := newHotPairClock(t, bhcrypto.AESGCM, clock)
	clock.Advance(age) // no loop runs: this only moves time
	for h.a.hs.gate.pace() {
	}
	return &pacedPair{
		hotPair: h, clock: clock, peer: h.a.state.Load().order[0],
		in: h.a.newInsideBatch(), pkt: udpPacket(t, podA, podB, make([]byte, 100)),
		scratch: make([]byte, h.a.set.bufSize),
	}
}

// send routes one packet from A's TUN at the clock's time, then runs
// what the handshake loop would for each request it finds.
func (pp *pacedPair) send() {
	pp.a.routeBatch(refill(pp.in, pp.pkt), 1, pp.clock.Now())
	for {
		select {
		case p := <-pp.a.hs.trigger:
			pp.wakes++
			pp.a.hs.triggered(p, pp.clock.Now(), pp.scratch)
		default:
			return
		}
	}
}

// TestPaceRefusalHoldsRekeyWants: with the session due for rekeying and
// our handshake pace spent, the packets that keep using the session wake
// the handshake loop once, not once each (it could only be refused
// again), and the next packet once the pace has a token again starts the
// handshake.
func TestPaceRefusalHoldsRekeyWants(t *testing.T) {
	const packets = 500
	pp := newPacedPair(t, RekeyAfterTime+time.Second)
	sent := pp.bindA.sent
	for range packets {
		pp.send()
	}
	if pp.wakes > 1 {
		t.Errorf("%d packets due for rekeying woke the handshake loop %d times while the pace refused, want at most 1", packets, pp.wakes)
	}
	if got := pp.bindA.sent - sent; got != packets {
		t.Errorf("%d of %d packets sent on the session due for rekeying", got, packets)
	}
	if n := pp.a.hs.count.initiated.Load(); n != 0 {
		t.Fatalf("%d handshakes initiated with the pace spent", n)
	}
	pp.clock.Advance(time.Second / InitiationRate)
	wakes := pp.wakes
	pp.send()
	if pp.wakes != wakes+1 || pp.a.hs.count.initiated.Load() != 1 || !pp.peer.handshaking.Load() {
		t.Errorf("once the pace allows: %d wakes, %d initiated, handshaking %v; want 1, 1, true",
			pp.wakes-wakes, pp.a.hs.count.initiated.Load(), pp.peer.handshaking.Load())
	}
}

// TestPaceRefusalHoldsNoSessionWants: without a session, the packets
// queued for one wake the handshake loop once while the pace refuses;
// the hold is for new sessions only, so a session made current meanwhile
// still gets its queue flushed by the next packet.
func TestPaceRefusalHoldsNoSessionWants(t *testing.T) {
	const packets = 100
	pp := newPacedPair(t, time.Second)
	kp := pp.peer.current.Swap(nil)
	sent := pp.bindA.sent
	for range packets {
		pp.send()
	}
	if pp.wakes > 1 {
		t.Errorf("%d packets without a session woke the handshake loop %d times while the pace refused, want at most 1", packets, pp.wakes)
	}
	queued := pp.peer.queue.Len()
	if queued != packets || pp.bindA.sent != sent {
		t.Fatalf("%d queued, %d sent without a session; want %d and 0", queued, pp.bindA.sent-sent, packets)
	}
	pp.peer.current.Store(kp) // as confirm would, pace or no pace
	wakes := pp.wakes
	pp.send()
	if pp.wakes != wakes+1 {
		t.Errorf("a packet behind the queue of a usable session woke the loop %d times, want 1", pp.wakes-wakes)
	}
	if got := pp.bindA.sent - sent; got != queued+1 || pp.peer.queue.Len() != 0 {
		t.Errorf("%d sent, %d left queued; want %d and 0", got, pp.peer.queue.Len(), queued+1)
	}
}

// TestRekeyAtMessageLimit: the message limits, read once per batch
// (sendCounts), still apply at their counts: a session that reached
// RekeyAfterMessages asks for a handshake, and one that reached
// RejectAfterMessages seals nothing.
func TestRekeyAtMessageLimit(t *testing.T) {
	t.Run("rekey", func(t *testing.T) {
		pp := newPacedPair(t, time.Second)
		pp.clock.Advance(time.Second) // the pace has tokens again
		kp := pp.peer.current.Load()
		kp.ReserveCounters(bhcrypto.RekeyAfterMessages - 1)
		pp.send() // seals counter RekeyAfterMessages-1: not due yet
		if pp.wakes != 0 {
			t.Fatalf("woke the loop %d times below RekeyAfterMessages", pp.wakes)
		}
		pp.send()
		if pp.wakes != 1 || pp.a.hs.count.initiated.Load() != 1 {
			t.Errorf("at RekeyAfterMessages: %d wakes, %d initiated; want 1 and 1", pp.wakes, pp.a.hs.count.initiated.Load())
		}
	})
	t.Run("reject", func(t *testing.T) {
		pp := newPacedPair(t, time.Second)
		kp := pp.peer.current.Load()
		for {
			if _, got := kp.ReserveCounters(1 << 62); got == 0 {
				break
			}
		}
		sent := pp.bindA.sent
		for range 3 {
			pp.send()
		}
		if pp.bindA.sent != sent {
			t.Errorf("%d datagrams sealed on a session past RejectAfterMessages", pp.bindA.sent-sent)
		}
		if pp.peer.queue.Len() != 3 {
			t.Errorf("%d packets queued for a new session, want 3", pp.peer.queue.Len())
		}
	})
}

// BenchmarkSealRouteRekeyPaced is BenchmarkSealRoute1420 with the session
// due for rekeying and the handshake pace spent, as after a restart with
// many peers, with a goroutine standing in for the handshake loop: what
// the requests the pace refuses cost (measure the process's CPU time
// too, the loop's share is on another core).
func BenchmarkSealRouteRekeyPaced(b *testing.B) {
	clock := newFakeClock()
	h := newHotPairClock(b, bhcrypto.AESGCM, clock)
	h.bindA.discard = true
	clock.Advance(RekeyAfterTime + time.Second)
	for h.a.hs.gate.pace() {
	}
	done := make(chan struct{})
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		scratch := make([]byte, h.a.set.bufSize)
		for {
			select {
			case p := <-h.a.hs.trigger:
				h.a.hs.triggered(p, clock.Now(), scratch)
			case <-done:
				return
			}
		}
	}()
	pkt := udpPacket(b, podA, podB, make([]byte, 1420-28))
	in := h.a.newInsideBatch()
	refill(in, pkt)
	now := clock.Now()
	b.SetBytes(1420)
	b.ReportAllocs()
	for b.Loop() {
		copy(in.bufs[0][bufHeadroom:bufHeadroom+28], pkt[:28])
		h.a.routeBatch(in, 1, now)
	}
	b.StopTimer()
	close(done)
	<-stopped
	b.ReportMetric(float64(h.a.hs.count.triggers.Load())/float64(b.N), "loop-wakes/op")
}

// TestPaceRefusalHoldsUnknownIndexWants: transport messages from a
// peer's endpoint on a session we do not have (we restarted) each ask
// for a new session; while the pace refuses, they wake the handshake
// loop once, not once each.
func TestPaceRefusalHoldsUnknownIndexWants(t *testing.T) {
	const datagrams = 200
	pp := newPacedPair(t, time.Second)
	pp.peer.current.Swap(nil)
	from := pp.peer.Endpoint()
	st := pp.a.state.Load()
	msg := make([]byte, bhcrypto.TransportOverhead+16)
	msg[0] = bhcrypto.MsgTransport
	binary.LittleEndian.PutUint32(msg[4:8], 0xdead_beef) // no session of A's
	dropped := pp.a.drops.Get(Outside, ReasonUnknownIndex)
	for i := range datagrams {
		binary.LittleEndian.PutUint64(msg[8:16], uint64(i))
		if _, ok := pp.a.openTransport(nil, st, msg, from, pp.clock.Now()); ok {
			t.Fatal("a message on an unknown index was opened")
		}
		for {
			select {
			case p := <-pp.a.hs.trigger:
				pp.wakes++
				pp.a.hs.triggered(p, pp.clock.Now(), pp.scratch)
				continue
			default:
			}
			break
		}
	}
	if got := pp.a.drops.Get(Outside, ReasonUnknownIndex) - dropped; got != datagrams {
		t.Errorf("%d of %d dropped as unknown_index", got, datagrams)
	}
	if pp.wakes > 1 {
		t.Errorf("%d datagrams on an unknown index woke the handshake loop %d times while the pace refused, want at most 1", datagrams, pp.wakes)
	}
}
