package router

import (
	"strings"
	"testing"
	"time"
)

// TestDrainingMovesFlows: B1 says it is draining (SetDraining(true), as
// the daemon does on SIGTERM). A takes it down at once, within a probe
// tick and a round trip rather than ProbeMisses silent intervals, for
// the reason "draining", and moves its flows to B2, while B1 still
// forwards what it is given. When a gateway that does not drain answers
// in its place (the new process of a rolling upgrade), it is up again
// after RecoverProbes answers: the planned stop counted no flap.
func TestDrainingMovesFlows(t *testing.T) {
	clock := newFakeClock()
	_, a, b1, b2 := newFilteredGateways(t, clock)
	sendFlows(t, a, b1, b2, 16, 0)
	b1.r.SetDraining(true)
	var downAfter time.Duration
	// Each tick of the fake clock gets up to 100 ms of real time to be
	// handled before the next: on a loaded machine the loops lag the
	// clock, and a fixed short sleep let it run ahead of them (23 ticks
	// "late" in one run while other tests kept both cores busy).
	down := func() bool { return peerStats(a, "gw-b1").Live.State == LiveDown }
	for elapsed := time.Duration(0); elapsed < 5*time.Second; elapsed += ProbeTick {
		if down() {
			downAfter = elapsed
			break
		}
		clock.Advance(ProbeTick)
		for wait := time.Now().Add(100 * time.Millisecond); !down() && time.Now().Before(wait); {
			time.Sleep(time.Millisecond)
		}
	}
	st := peerStats(a, "gw-b1").Live
	if st.State != LiveDown || st.Reason != DownDraining || !st.Draining {
		t.Fatalf("gw-b1 at A after it started draining: %+v", st)
	}
	// The announcement goes out at B1's next tick and A's answer is
	// read at its next: two ticks, not ProbeMisses intervals.
	if limit := 3 * ProbeTick; downAfter > limit {
		t.Errorf("gw-b1 down %s after it started draining, want within %s", downAfter, limit)
	}
	t.Logf("draining: down at A after %s (fake clock)", downAfter)
	got := scrape(t, a.r)
	for _, series := range []string{
		`bridgehead_peer_down_reason{gateway="gw-b1",reason="draining",site="site-b"} 1`,
		`bridgehead_peer_down_reason{gateway="gw-b2",reason="draining",site="site-b"} 0`,
	} {
		if !strings.Contains(got, series+"\n") {
			t.Errorf("metrics of A lack %s", series)
		}
	}
	for f, gws := range sendFlows(t, a, b1, b2, 16, 1) {
		if gws["b1"] > 0 {
			t.Errorf("flow %d still sent to the draining gw-b1", f)
		}
	}
	// A draining gateway keeps forwarding: B1 to A still works.
	rx := peerStats(a, "gw-b1").RxBytes
	b1.tun.Inject(udpPacket(t, podB, podA, []byte("from a draining gateway")))
	waitFor(t, "A receives from the draining gw-b1", func() bool { return peerStats(a, "gw-b1").RxBytes > rx })

	// Its process exits: down for no answer after ProbeMisses
	// intervals, its draining flag forgotten, and no second down.
	b1.close(t)
	waitFor(t, "gw-b1 down for no answer at A", func() bool {
		clock.Advance(ProbeTick)
		st := peerStats(a, "gw-b1").Live
		return st.Reason == DownNoAnswer && !st.Draining
	})
	if st := peerStats(a, "gw-b1").Live; st.State != LiveDown || st.Downs != 1 {
		t.Errorf("gw-b1 after its process exited: %+v, want down once", st)
	}
}

// TestDrainingThenReplaced: the draining gateway's replacement (the
// new process of a rolling upgrade, which does not drain) answers in its
// place: it is up again after RecoverProbes answers, as the planned stop
// counted no flap.
func TestDrainingThenReplaced(t *testing.T) {
	clock := newFakeClock()
	_, a, b1, b2 := newFilteredGateways(t, clock)
	sendFlows(t, a, b1, b2, 16, 0)
	b1.r.SetDraining(true)
	waitFor(t, "gw-b1 down for draining at A", func() bool {
		clock.Advance(ProbeTick)
		return peerStats(a, "gw-b1").Live.Reason == DownDraining
	})
	b1.r.SetDraining(false) // its replacement answers
	waitUp(t, clock, a)
	var p *Peer
	for _, q := range a.r.state.Load().order {
		if q.name == "gw-b1" {
			p = q
		}
	}
	if st := peerStats(a, "gw-b1").Live; st.Downs != 1 || p.live.damp.Flaps() != 0 || p.live.damp.Need() != RecoverProbes {
		t.Errorf("after a drain gw-b1 has %d downs, %d flaps, needs %d answers; want 1, 0, %d", st.Downs, p.live.damp.Flaps(), p.live.damp.Need(), RecoverProbes)
	}
}
