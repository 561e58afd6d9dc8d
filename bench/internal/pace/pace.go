// Package pace sends a benchmark's probes one per tick and waits for the
// last replies: the sending half that ping and udprr share, whatever
// their probes are.
package pace

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"time"
)

// Send calls send(i) for i = 0, 1, ... while more(i), one call per
// interval, until ctx ends. A send failing with ENOBUFS (a full queue
// under load) is a lost probe, counted as sent; any other error ends the
// run. It returns the probes sent, and the error that ended it early.
func Send(ctx context.Context, interval time.Duration, more func(i int) bool, send func(i int) error) (int, error) {
	tick := time.NewTicker(interval)
	defer tick.Stop()
	sent := 0
	for i := 0; more(i); i++ {
		if err := send(i); err != nil && !errors.Is(err, syscall.ENOBUFS) {
			return sent, err
		}
		sent++
		select {
		case <-ctx.Done():
			return sent, ctx.Err()
		case <-tick.C:
		}
	}
	return sent, nil
}

// Drain waits for stragglers: until done, called with l held (the lock
// of the replies' reader), says every reply came back, ctx ends, or a
// second has passed, looking every 10 ms.
func Drain(ctx context.Context, l sync.Locker, done func() bool) {
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		l.Lock()
		ok := done()
		l.Unlock()
		if ok {
			return
		}
		time.Sleep(10 * time.Millisecond)
	}
}
