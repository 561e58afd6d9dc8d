package controller

import (
	"sync"
	"time"
)

// firstPass tracks a new leader's first full reconcile: every Node key
// lead enqueued when it took over (the rebuild's List and the cache) has
// been reconciled without error once. Until then a Node of the cluster
// may still wait for the new leader (a join during the failover, a
// reconcile the old leader left unfinished); once it fires, the failover
// is over. done runs once, on the worker that reconciles the last key,
// with the keys' count and the time since start. Its methods are safe
// for concurrent use by the node workers.
type firstPass struct {
	mu      sync.Mutex
	pending map[string]struct{}
	n       int
	start   time.Time
	now     func() time.Time
	done    func(nodes int, took time.Duration)
}

// newFirstPass tracks keys from start; with no keys, done runs at once.
func newFirstPass(keys []string, start time.Time, now func() time.Time, done func(int, time.Duration)) *firstPass {
	f := &firstPass{pending: make(map[string]struct{}, len(keys)), start: start, now: now, done: done}
	for _, k := range keys {
		f.pending[k] = struct{}{}
	}
	f.n = len(f.pending)
	if f.n == 0 {
		f.fire()
	}
	return f
}

// reconciled notes that key's reconcile succeeded.
func (f *firstPass) reconciled(key string) {
	f.mu.Lock()
	if _, ok := f.pending[key]; !ok {
		f.mu.Unlock()
		return
	}
	delete(f.pending, key)
	last := len(f.pending) == 0
	f.mu.Unlock()
	if last {
		f.fire()
	}
}

func (f *firstPass) fire() {
	if f.done != nil {
		f.done(f.n, f.now().Sub(f.start))
	}
}
