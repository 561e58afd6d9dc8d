// Package clocktest builds times for tests of code that must measure
// durations on the monotonic clock.
package clocktest

import (
	"testing"
	"time"
	"unsafe"
)

// WallStep returns t with its wall clock moved by step and its monotonic
// reading unchanged: what time.Now() returns after NTP (chrony at first
// boot) steps the clock. The standard library has no way to make such a
// value, so this writes the monotonic field of time.Time directly; it
// fails the test if the result is not what it claims (a changed
// time.Time layout). t must carry a monotonic reading (from time.Now).
func WallStep(tb testing.TB, t time.Time, step time.Duration) time.Time {
	tb.Helper()
	s := t.Add(step) // wall and monotonic both move
	(*struct {
		wall uint64
		ext  int64
		loc  *time.Location
	})(unsafe.Pointer(&s)).ext -= int64(step) // monotonic back
	if s.Sub(t) != 0 || s.Unix()-t.Unix() != int64(step/time.Second) {
		tb.Fatalf("cannot build a wall-stepped time: Sub %v, wall %v", s.Sub(t), s.Unix()-t.Unix())
	}
	return s
}
