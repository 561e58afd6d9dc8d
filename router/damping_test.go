package router

import (
	"net/netip"
	"testing"
	"time"
)

// TestFlapDamping: the path from A to B1 loses everything for a few probe
// intervals, then carries a probe or a few, over and over. B1 must not
// come back up at every answered probe and go down again three intervals
// later, moving its flows back and forth at probe rate: after the first
// down it stays down while the path keeps failing, and once the path
// heals it comes back.
func TestFlapDamping(t *testing.T) {
	iv := DefaultProbeInterval
	tests := []struct {
		name       string
		lose, pass time.Duration // one cycle of the path
		cycles     int
		maxDowns   uint64
	}{
		{"one probe in five passes", 4 * iv, iv, 8, 1},
		{"four intervals lost, five pass", 4 * iv, 5 * iv, 4, 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := newFakeClock()
			fa, a, b1, b2 := newFilteredGateways(t, clock)
			sendFlows(t, a, b1, b2, 16, 0) // A is active toward both
			toB1 := b1.bind.LocalAddr()
			lossy := func(_ []byte, ep netip.AddrPort) bool { return ep == toB1 }
			run := func(d time.Duration) (changes int) {
				was := peerStats(a, "gw-b1").Live.State
				for range int(d / ProbeTick) {
					clock.Advance(ProbeTick)
					time.Sleep(time.Millisecond)
					if st := peerStats(a, "gw-b1").Live.State; st != was {
						changes++
						was = st
					}
				}
				return changes
			}
			changes := 0
			for range tt.cycles {
				fa.setDrop(lossy)
				changes += run(tt.lose)
				fa.setDrop(nil)
				changes += run(tt.pass)
			}
			st := peerStats(a, "gw-b1").Live
			t.Logf("%d cycles of %s lost, %s passing: %d state changes, %d downs, now %s", tt.cycles, tt.lose, tt.pass, changes, st.Downs, st.State)
			if st.Downs == 0 {
				t.Fatal("gw-b1 never went down: the test did not cut the path")
			}
			if st.Downs > tt.maxDowns {
				t.Errorf("gw-b1 went down %d times in %d cycles, want at most %d: it flaps with the path", st.Downs, tt.cycles, tt.maxDowns)
			}
			// Healed: back within the longest hold-down.
			elapsed := time.Duration(0)
			for ; peerStats(a, "gw-b1").Live.State != LiveUp; elapsed += ProbeTick {
				if elapsed > time.Minute {
					t.Fatalf("gw-b1 not up %s after the path healed: %+v", elapsed, peerStats(a, "gw-b1").Live)
				}
				clock.Advance(ProbeTick)
				time.Sleep(time.Millisecond)
			}
			t.Logf("healed: up again after %s", elapsed)
		})
	}
}

// TestRecoverAfterAnswers: a gateway that went down is up again on the
// RecoverProbes-th answer in a row, not on the first; the probes lost
// before the path healed, as they time out, start the count over. One
// whose flows left it long ago (so it is probed at the idle pace) is
// probed at the full pace from its first answer, so the count takes
// intervals, not idle intervals.
func TestRecoverAfterAnswers(t *testing.T) {
	iv := DefaultProbeInterval
	tests := []struct {
		name string
		down time.Duration // how long the path stays cut after the down
		// within is how soon after the path healed it must be up.
		within time.Duration
	}{
		{"down a moment", 0, probeTimeoutOf(iv) + (RecoverProbes+2)*iv},
		{"down past ActiveWindow", ActiveWindow + time.Second, IdleProbeFactor*iv + probeTimeoutOf(iv) + (RecoverProbes+2)*iv},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := newProbeLink(t)
			now := l.start
			for l.pa.live.State() != LiveDown { // every probe is lost
				now = now.Add(ProbeTick)
				l.run(t, now)
			}
			for healed := now.Add(tt.down); now.Before(healed); {
				now = now.Add(ProbeTick)
				l.run(t, now)
			}
			answers, inRow := 0, 0
			base := l.pa.live.damp.Base()
			elapsed := time.Duration(0)
			for ; l.pa.live.State() != LiveUp; elapsed += ProbeTick {
				if elapsed > time.Minute {
					t.Fatalf("not up %s after the path healed, %d answers", elapsed, answers)
				}
				now = now.Add(ProbeTick)
				p := l.run(t, now)
				if b := l.pa.live.damp.Base(); b != base { // a lost probe timed out
					base, inRow = b, 0
				}
				if p != nil && l.pa.live.State() != LiveUp {
					l.deliver(l.answer(t, p, now), now)
					answers++
					inRow++
				}
			}
			t.Logf("up again %s after the path healed, after %d answers, the last %d in a row", elapsed, answers, inRow)
			if inRow != RecoverProbes || answers < 2 {
				t.Errorf("up again after %d answers, %d since the last lost probe timed out; want %d in a row", answers, inRow, RecoverProbes)
			}
			if elapsed > tt.within {
				t.Errorf("up again %s after the path healed, want within %s", elapsed, tt.within)
			}
		})
	}
}

// probeTimeoutOf is probeTimeout for interval iv on a fast path.
func probeTimeoutOf(iv time.Duration) time.Duration { return time.Duration(probeTimeout(int64(iv), 0)) }
