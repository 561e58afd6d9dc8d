package lab

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestWaitFor(t *testing.T) {
	boom := errors.New("boom")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	cases := []struct {
		name  string
		ctx   context.Context
		limit time.Duration
		cond  func(calls int) (bool, error)
		calls int
		want  string // "" for success
	}{
		{"true at once", context.Background(), time.Second, func(int) (bool, error) { return true, nil }, 1, ""},
		{"true on the third poll", context.Background(), 5 * time.Second, func(n int) (bool, error) { return n == 3, nil }, 3, ""},
		{"error stops", context.Background(), time.Second, func(int) (bool, error) { return false, boom }, 1, "boom"},
		{"limit", context.Background(), 0, func(int) (bool, error) { return false, nil }, 1, "timed out"},
		{"cancelled", cancelled, time.Minute, func(int) (bool, error) { return false, nil }, 1, "context canceled"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			calls := 0
			err := WaitFor(c.ctx, c.limit, func() (bool, error) { calls++; return c.cond(calls) })
			if calls != c.calls {
				t.Errorf("%d polls, want %d", calls, c.calls)
			}
			if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
				t.Errorf("err = %v, want %q", err, c.want)
			}
		})
	}
}
