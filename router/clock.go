package router

import "time"

// Clock is the router's source of time. The handshake loop calls Now and
// waits on a Ticker; the data path calls Now once per batch.
type Clock interface {
	Now() time.Time
	// Ticker returns a channel that delivers at roughly interval d and a
	// function that stops it.
	Ticker(d time.Duration) (<-chan time.Time, func())
}

// SystemClock is the wall clock.
type SystemClock struct{}

// Now returns time.Now().
func (SystemClock) Now() time.Time { return time.Now() }

// Ticker wraps time.NewTicker.
func (SystemClock) Ticker(d time.Duration) (<-chan time.Time, func()) {
	t := time.NewTicker(d)
	return t.C, t.Stop
}

// monoEpoch turns times into nanoseconds since an epoch taken when the
// Router was made, for the stamps that liveness, readiness and the
// watchdog compare. Times from SystemClock carry Go's monotonic reading,
// so these differences do not move when NTP steps the wall clock (unlike
// UnixNano). 0 keeps meaning "never": the epoch is a second before the
// Router existed.
type monoEpoch struct{ t time.Time }

func newMonoEpoch(now time.Time) monoEpoch { return monoEpoch{now.Add(-time.Second)} }

// ns returns t as nanoseconds since the epoch.
func (e monoEpoch) ns(t time.Time) int64 { return int64(t.Sub(e.t)) }

// time returns the time of a stamp made by ns, with the epoch's monotonic
// reading, or the zero Time for 0.
func (e monoEpoch) time(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return e.t.Add(time.Duration(ns))
}
