package controller

import (
	"sync"
	"testing"
	"time"
)

// waitChanged waits until cond holds, re-checking each time *ch
// (guarded by mu) is closed: the informer handlers of a test's watcher
// close and replace it on every change.
func waitChanged(t *testing.T, mu *sync.Mutex, ch *chan struct{}, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		mu.Lock()
		changed := *ch
		mu.Unlock()
		if cond() {
			return
		}
		select {
		case <-changed:
		case <-deadline:
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
	}
}

// createParallel calls create(i) for i in [0, n) from workers
// goroutines (worker w takes w, w+workers, ...) and fails tb with the
// first error; a worker stops at its first error.
func createParallel(tb testing.TB, n, workers int, create func(i int) error) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := w; i < n; i += workers {
				if err := create(i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}
