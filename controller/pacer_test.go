package controller

import (
	"testing"
	"time"
)

// TestPacer: no wait before the first write; after one, the rest of the
// interval counted from its end, never negative.
func TestPacer(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var p pacer
	if w := p.wait(time.Second, t0); w != 0 {
		t.Fatalf("before any write: wait %v", w)
	}
	p.done(t0)
	for _, tc := range []struct {
		after, want time.Duration
	}{{0, time.Second}, {300 * time.Millisecond, 700 * time.Millisecond}, {time.Second, 0}, {5 * time.Second, 0}} {
		if w := p.wait(time.Second, t0.Add(tc.after)); w != tc.want {
			t.Errorf("%v after a write: wait %v, want %v", tc.after, w, tc.want)
		}
	}
}
