package controller

import (
	"sync/atomic"
	"time"
)

// pacer spaces the writes of one kind (the catalog's publications, the
// release shards) at least an interval apart, counted from the end of the
// last one. Its kind's one worker calls done; enqueuers and that worker
// read wait. Callers pass the wall clock (time.Now), not Options.Now:
// the wait goes to the workqueue's AddAfter, which counts real time, and
// a pacer on a test's frozen clock would re-queue its key forever.
type pacer struct {
	last atomic.Int64 // when the last write ended (UnixNano; 0: none)
}

// wait is how long the next write must wait at now.
func (p *pacer) wait(interval time.Duration, now time.Time) time.Duration {
	last := p.last.Load()
	if last == 0 {
		return 0
	}
	return max(time.Duration(last+int64(interval)-now.UnixNano()), 0)
}

// done records that a write ended at now.
func (p *pacer) done(now time.Time) { p.last.Store(now.UnixNano()) }
