package router

import (
	"strings"
	"testing"
	"time"
)

// TestLoopHealthPart: a loop waiting for input (stamp 0) is healthy, one
// on a batch or without timers for longer than StuckAfter is named.
func TestLoopHealthPart(t *testing.T) {
	const now = int64(time.Hour)
	for _, tc := range []struct {
		name                   string
		inside, outside, timer int64
		want                   string
	}{
		{"idle", 0, 0, 0, ""},
		{"busy, in time", now - int64(StuckAfter), now - 1, now - int64(time.Second), ""},
		{"inside stuck", now - int64(StuckAfter) - 1, 0, now, "inside loop stuck"},
		{"outside stuck", 0, now - int64(time.Minute), now, "outside loop stuck"},
		{"timers late", 0, 0, now - int64(time.Minute), "handshake loop has not run"},
	} {
		var l loopHealth
		l.inside.Store(tc.inside)
		l.outside.Store(tc.outside)
		l.timers.Store(tc.timer)
		err := l.check(now)
		if (err == nil) != (tc.want == "") || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want %q", tc.name, err, tc.want)
		}
	}
}
