package crypto

import (
	mrand "math/rand/v2"
	"testing"
)

type replayStep struct {
	c    uint64
	want bool
}

func runReplay(t *testing.T, w *ReplayWindow, steps []replayStep) {
	t.Helper()
	for i, s := range steps {
		if got := w.Check(s.c); got != s.want {
			t.Fatalf("step %d: Check(%d) = %v, want %v", i, s.c, got, s.want)
		}
	}
}

func TestReplayWindowTable(t *testing.T) {
	const W = ReplayWindowSize
	far := uint64(1) << 40
	tests := []struct {
		name  string
		steps []replayStep
	}{
		{"zero first", []replayStep{{0, true}, {0, false}, {1, true}, {1, false}}},
		{"duplicates", []replayStep{{5, true}, {3, true}, {5, false}, {3, false}, {4, true}, {4, false}}},
		{"reorder within window", []replayStep{{10, true}, {8, true}, {9, true}, {7, true}, {11, true}, {6, true}}},
		{"exactly window edge", []replayStep{
			{W + 100, true},
			{100 + 1, true},  // top - (W-1): oldest still tracked
			{100, false},     // top - W: one older, rejected
			{100 + 1, false}, // duplicate at the edge
		}},
		{"edge at word boundary", []replayStep{
			{W + 63, true}, {64, true}, {63, false},
		}},
		{"edge before counter 0 leaves", []replayStep{
			{W - 1, true}, {0, true}, {0, false}, {W, true}, {1, true},
		}},
		{"counter 0 falls out", []replayStep{{W, true}, {0, false}}},
		{"far future then old", []replayStep{
			{1, true}, {2, true}, {far, true}, {2, false}, {3, false}, {far - 1, true}, {far, false},
			{far - W + 1, true}, {far - W, false},
		}},
		{"jump just under ring then back", []replayStep{
			{0, true}, {W - 1, true}, {1, true}, {W - 1, false}, {W, true}, {1, false}, {2, true},
		}},
		{"counter limit", []replayStep{
			{RejectAfterMessages, false},
			{RejectAfterMessages + 1, false},
			{^uint64(0), false},
			{RejectAfterMessages - 1, true},
			{RejectAfterMessages - 1, false},
			{RejectAfterMessages - 2, true},
			{RejectAfterMessages - 1 - W, false},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var w ReplayWindow
			runReplay(t, &w, tc.steps)
		})
	}
}

// TestReplayWindowWrap moves the window around the ring many times with a
// mix of in-order, slightly reordered and duplicate counters.
func TestReplayWindowWrap(t *testing.T) {
	var w ReplayWindow
	const n = replayRingBits * 20
	for c := uint64(0); c < n; c += 2 {
		if !w.Check(c + 1) {
			t.Fatalf("Check(%d) rejected new counter", c+1)
		}
		if !w.Check(c) {
			t.Fatalf("Check(%d) rejected reordered counter", c)
		}
		if w.Check(c) || w.Check(c+1) {
			t.Fatalf("duplicate accepted at %d", c)
		}
		if c >= ReplayWindowSize && w.Check(c+1-ReplayWindowSize) {
			t.Fatalf("stale counter %d accepted", c+1-ReplayWindowSize)
		}
	}
}

// naiveWindow is the obviously correct reference: a set of every counter
// ever accepted plus the window rule.
type naiveWindow struct {
	seen map[uint64]bool
	top  uint64
}

func (n *naiveWindow) check(c uint64) bool {
	if c >= RejectAfterMessages || n.seen[c] {
		return false
	}
	if c <= n.top && n.top-c >= ReplayWindowSize {
		return false
	}
	n.seen[c] = true
	n.top = max(n.top, c)
	return true
}

func TestReplayWindowRandomVsReference(t *testing.T) {
	r := mrand.New(mrand.NewPCG(1, 2))
	var w ReplayWindow
	ref := naiveWindow{seen: map[uint64]bool{}}
	var base uint64
	accepted := 0
	for i := 0; i < 300000; i++ {
		var c uint64
		switch r.IntN(10) {
		case 0: // far jump (past the ring), sometimes
			if r.IntN(100) == 0 {
				base += uint64(replayRingBits) * uint64(1+r.IntN(3))
			}
			c = base
		case 1, 2: // around the window edge
			c = base - uint64(ReplayWindowSize) + uint64(r.IntN(130)) - 65
		case 3: // recent duplicate-prone range
			c = base - uint64(r.IntN(200))
		default: // mostly forward with jitter
			base += uint64(r.IntN(80))
			c = base - uint64(r.IntN(2*ReplayWindowSize))
		}
		if c > base+uint64(1)<<62 { // underflow near start: keep it small
			c = uint64(r.IntN(100))
		}
		got, want := w.Check(c), ref.check(c)
		if got != want {
			t.Fatalf("step %d: Check(%d) = %v, reference %v (base %d)", i, c, got, want, base)
		}
		if got {
			accepted++
		}
	}
	if accepted < 1000 {
		t.Fatalf("only %d counters accepted; test is not exercising the window", accepted)
	}
}

func TestReplayWindowReset(t *testing.T) {
	var w ReplayWindow
	w.Check(1 << 30)
	w.Reset()
	if !w.Check(0) || !w.Check(5) {
		t.Fatal("Reset did not empty the window")
	}
}
