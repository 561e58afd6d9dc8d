package router

import "time"

// Clock is the router's source of time. The handshake loop calls Now and
// waits on Tick; the data path calls Now once per batch.
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
