package controller

import (
	"slices"
	"sync"
	"testing"
	"time"
)

// TestFirstPass: done fires once, when the last key first enqueued is
// reconciled, whatever the order, repeats and keys it never tracked.
func TestFirstPass(t *testing.T) {
	t0 := time.Unix(1000, 0)
	for _, tc := range []struct {
		name       string
		keys       []string
		reconciled []string
		fired      []int // the step after which done has fired (-1: at creation)
	}{
		{"no keys", nil, []string{"a"}, []int{-1}},
		{"in order", []string{"a", "b", "c"}, []string{"a", "b", "c"}, []int{2}},
		{"repeats and strangers", []string{"a", "b", "a"}, []string{"a", "x", "a", "b", "b"}, []int{3}},
		{"never all", []string{"a", "b"}, []string{"a", "a"}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			step := -1
			var fired []int
			var nodes int
			var took time.Duration
			now := t0
			f := newFirstPass(tc.keys, t0, func() time.Time { return now }, func(n int, d time.Duration) {
				fired = append(fired, step)
				nodes, took = n, d
			})
			for i, k := range tc.reconciled {
				step, now = i, now.Add(time.Second)
				f.reconciled(k)
			}
			if !slices.Equal(fired, tc.fired) {
				t.Fatalf("fired after steps %v, want %v", fired, tc.fired)
			}
			if len(fired) == 1 && fired[0] >= 0 && (took != time.Duration(fired[0]+1)*time.Second || nodes != f.n) {
				t.Fatalf("done(%d, %s)", nodes, took)
			}
		})
	}
	// Concurrent workers: done fires exactly once.
	keys := make([]string, 1000)
	for i := range keys {
		keys[i] = string(rune('a'+i%26)) + string(rune(i))
	}
	var mu sync.Mutex
	calls := 0
	f := newFirstPass(keys, t0, time.Now, func(int, time.Duration) { mu.Lock(); calls++; mu.Unlock() })
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < len(keys); i += 8 {
				f.reconciled(keys[i])
				f.reconciled(keys[i])
			}
		})
	}
	wg.Wait()
	if calls != 1 {
		t.Fatalf("done called %d times", calls)
	}
}
