package router

import (
	"bytes"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/probestate"
)

// probeLink is A probing B over a hotPair, one datagram at a time and by
// hand, so that a test can hold a datagram back, lose it or forge the
// peer's answer. A's clock is the time passed to each call.
type probeLink struct {
	h      *hotPair
	pa     *Peer // B at A
	kpB    *bhcrypto.Keypair
	toA    *outsideBatch
	toB    *outsideBatch
	start  time.Time
	sealed []byte
}

// newProbeLink is a hotPair on which A has proved B alive at start (as a
// handshake would) and seen it up, and sends it data.
func newProbeLink(t *testing.T) *probeLink {
	t.Helper()
	h := newHotPair(t, bhcrypto.AESGCM)
	l := &probeLink{h: h, start: h.now, toA: h.a.newOutsideBatch(), toB: h.b.newOutsideBatch(), sealed: probeScratch()}
	l.pa = h.a.state.Load().order[0]
	l.kpB = h.b.state.Load().order[0].current.Load()
	l.pa.live.acked.Store(h.a.mono.ns(h.now))
	l.pa.txPackets.Add(1) // A sends B data: probed at the full pace
	l.run(t, h.now)
	if st := l.pa.live.State(); st != LiveUp {
		t.Fatalf("B at A after a handshake: %s", st)
	}
	return l
}

// run runs A's prober at now and returns the probe it sent, if any.
func (l *probeLink) run(t *testing.T, now time.Time) []byte {
	t.Helper()
	sent := l.h.bindA.sent
	l.h.a.probe.run(l.h.a.state.Load(), now)
	if l.h.bindA.sent == sent {
		return nil
	}
	return bytes.Clone(l.h.bindA.last[:l.h.bindA.n])
}

// answer hands probe to B at now and returns B's reply.
func (l *probeLink) answer(t *testing.T, probe []byte, now time.Time) []byte {
	t.Helper()
	sent := l.h.bindB.sent
	l.toB.sizes[0] = copy(l.toB.bufs[0], probe)
	l.toB.eps[0] = l.h.bindA.local
	l.h.b.receiveBatch(l.toB, 1, now)
	if l.h.bindB.sent == sent {
		t.Fatal("B did not answer the probe")
	}
	return bytes.Clone(l.h.bindB.last[:l.h.bindB.n])
}

// deliver hands msg, from B, to A at now.
func (l *probeLink) deliver(msg []byte, now time.Time) {
	l.toA.sizes[0] = copy(l.toA.bufs[0], msg)
	l.toA.eps[0] = l.h.bindB.local
	l.h.a.receiveBatch(l.toA, 1, now)
}

// forge is a reply B seals itself, echoing echo: what an authenticated
// reply carrying any echo looks like (a second answer to one probe, or a
// peer that answers what it was never asked).
func (l *probeLink) forge(t *testing.T, echo uint64) []byte {
	t.Helper()
	msg, err := sealControl(l.kpB, l.sealed, control{typ: probeReply, echo: echo, size: probeLen})
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Clone(msg)
}

// firstProbe runs A's prober one interval after start, when B is due a
// probe, and returns the probe and when it was sent.
func (l *probeLink) firstProbe(t *testing.T) ([]byte, time.Time) {
	t.Helper()
	at := l.start.Add(DefaultProbeInterval)
	p := l.run(t, at)
	if p == nil {
		t.Fatal("A sent no probe one interval after the handshake")
	}
	return p, at
}

// TestStaleProbeReplies: a probe reply is evidence that our packets reach
// the gateway only when it answers a probe of ours that is still in
// flight: not answered yet and not older than the probe timeout. A reply
// held back in a queue and delivered after the path died, a second
// answer to one probe, or an answer to a probe never sent must leave the
// gateway's liveness alone, or a dead path would look alive.
func TestStaleProbeReplies(t *testing.T) {
	iv := DefaultProbeInterval
	tests := []struct {
		name string
		// reply plays the case out and returns the reply A then gets
		// and when.
		reply  func(t *testing.T, l *probeLink) ([]byte, time.Time)
		accept bool
	}{
		{"answer to the probe in flight", func(t *testing.T, l *probeLink) ([]byte, time.Time) {
			p, at := l.firstProbe(t)
			return l.answer(t, p, at.Add(time.Millisecond)), at.Add(2 * time.Millisecond)
		}, true},
		{"answer held back until the path was declared dead", func(t *testing.T, l *probeLink) ([]byte, time.Time) {
			p, at := l.firstProbe(t)
			held := l.answer(t, p, at.Add(time.Millisecond))
			now := at
			for l.pa.live.State() != LiveDown { // every later probe is lost
				if now = now.Add(ProbeTick); now.Sub(at) > 2*ProbeMisses*iv {
					t.Fatalf("B not down %s after its answers stopped", now.Sub(at))
				}
				l.run(t, now)
			}
			return held, now.Add(ProbeTick)
		}, false},
		{"answer to a probe never sent", func(t *testing.T, l *probeLink) ([]byte, time.Time) {
			_, at := l.firstProbe(t)
			return l.forge(t, uint64(l.h.a.mono.ns(at.Add(-time.Millisecond)))), at.Add(time.Millisecond)
		}, false},
		{"second answer to one probe", func(t *testing.T, l *probeLink) ([]byte, time.Time) {
			p, at := l.firstProbe(t)
			l.deliver(l.answer(t, p, at.Add(time.Millisecond)), at.Add(2*time.Millisecond))
			if l.pa.live.probeReplies.Load() != 1 {
				t.Fatal("the first answer was not booked")
			}
			return l.forge(t, uint64(l.h.a.mono.ns(at))), at.Add(3 * time.Millisecond)
		}, false},
		{"answer to an MTU probe never sent", func(t *testing.T, l *probeLink) ([]byte, time.Time) {
			_, at := l.firstProbe(t)
			return l.forge(t, uint64(l.h.a.mono.ns(at))|probestate.MTUEcho), at.Add(time.Millisecond)
		}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLink(t)
			msg, at := tt.reply(t, l)
			acked, replies, mtu := l.pa.live.acked.Load(), l.pa.live.probeReplies.Load(), l.pa.live.pmtu.Answered()
			l.deliver(msg, at)
			gotAcked, gotReplies := l.pa.live.acked.Load(), l.pa.live.probeReplies.Load()
			switch {
			case tt.accept && (gotAcked != l.h.a.mono.ns(at) || gotReplies != replies+1):
				t.Errorf("reply not booked: acked %d (want %d), replies %d (want %d)", gotAcked, l.h.a.mono.ns(at), gotReplies, replies+1)
			case !tt.accept && (gotAcked != acked || gotReplies != replies || l.pa.live.pmtu.Answered() != mtu):
				t.Errorf("stale reply booked: acked moved %s, replies %d -> %d, MTU answer %d -> %d",
					time.Duration(gotAcked-acked), replies, gotReplies, mtu, l.pa.live.pmtu.Answered())
			}
			if stale := l.h.a.drops.Get(Outside, ReasonStaleProbeReply); stale != map[bool]uint64{true: 0, false: 1}[tt.accept] {
				t.Errorf("%d replies dropped as stale", stale)
			}
			l.run(t, at.Add(ProbeTick))
			if st := l.pa.live.State(); !tt.accept && st == LiveUp && acked < l.pa.live.changedMono.Load() {
				t.Errorf("a stale reply brought B back up")
			}
		})
	}
}
