package router

import (
	"fmt"
	"sync/atomic"
	"time"
)

// StuckAfter is how long a loop may spend on one batch, or the handshake
// loop go without running its timers, before Healthy reports it wedged.
const StuckAfter = 10 * time.Second

// loopHealth is the loops' progress as the watchdog sees it, in
// monotonic nanoseconds (monoEpoch): when each data loop started the
// batch it is working on (0 while it waits for input), and when the
// handshake loop last ran its timers. Each stamp has one writer, its
// loop; check reads them from any goroutine.
type loopHealth struct {
	inside, outside atomic.Int64
	timers          atomic.Int64
}

// check reports the first loop that is not making progress at ns.
func (l *loopHealth) check(ns int64) error {
	if t := l.inside.Load(); t != 0 && ns-t > int64(StuckAfter) {
		return fmt.Errorf("inside loop stuck on one batch for %s", time.Duration(ns-t))
	}
	if t := l.outside.Load(); t != 0 && ns-t > int64(StuckAfter) {
		return fmt.Errorf("outside loop stuck on one batch for %s", time.Duration(ns-t))
	}
	if t := l.timers.Load(); t != 0 && ns-t > int64(StuckAfter) {
		return fmt.Errorf("handshake loop has not run for %s", time.Duration(ns-t))
	}
	return nil
}
