// Package ratelimit limits how fast each source address may send handshake
// messages, so that one host (or one IPv6 /64) cannot make the router spend
// all its time on Diffie-Hellman.
//
// A Limiter keeps a token bucket per source: a source may send a burst of
// messages, then one message per 1/rate seconds. The table of sources is
// bounded: a new source in a full table evicts a tracked one (never is it
// refused for want of room), and idle sources are removed by GC, which the
// owner calls periodically (every second or so).
package ratelimit

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

const (
	// minIdle is the shortest time GC lets a source sit idle before
	// dropping it.
	minIdle = time.Second
	// evictSample is how many tracked sources a newcomer in a full
	// table looks at to choose the one to evict.
	evictSample = 8
	// maxIdle caps the idle time for very slow rates. An entry dropped
	// before its bucket refilled comes back full, so the cap only matters
	// for rates below burst per hour.
	maxIdle = time.Hour
)

// key identifies a source: an IPv4 address, or the first 64 bits of an
// IPv6 address.
type key struct {
	bits uint64
	v6   bool
}

func keyOf(ip netip.Addr) key {
	ip = ip.Unmap()
	if ip.Is4() {
		a := ip.As4()
		return key{bits: uint64(a[0])<<24 | uint64(a[1])<<16 | uint64(a[2])<<8 | uint64(a[3])}
	}
	a := ip.As16()
	var hi uint64
	for _, b := range a[:8] {
		hi = hi<<8 | uint64(b)
	}
	return key{bits: hi, v6: true}
}

// bucket is one source's state.
type bucket struct {
	tokens float64
	last   time.Time // when tokens was last brought up to date
}

// Stats counts refusals.
type Stats struct {
	// Limited counts messages refused because their source's bucket
	// was empty.
	Limited uint64
	// Evicted counts sources forgotten to make room for a new one
	// while the table held maxEntries sources.
	Evicted uint64
}

// Limiter allows each source a burst of messages, then a steady rate.
// Sources are keyed by IPv4 address (IPv4-mapped IPv6 addresses count as
// IPv4) or by IPv6 /64, since a single host usually controls a whole /64.
// The table is bounded: at most maxEntries sources are tracked. A new
// source in a full table evicts, of a few tracked sources sampled at
// random, the one whose bucket is fullest (forgetting it costs least: a
// full bucket is what a new entry starts with), and is counted in
// Stats().Evicted. So a flood of distinct sources cannot lock out an
// honest newcomer, and a source over its rate (an empty bucket) is almost
// never the one evicted. Allow does not allocate once a source is in the
// table.
//
// A Limiter is safe for concurrent use by multiple goroutines. All methods
// take one mutex; GC holds it for time proportional to Len.
type Limiter struct {
	rate       float64 // tokens per second; read-only
	burst      float64 // bucket size; read-only
	maxEntries int     // read-only
	idle       time.Duration
	now        func() time.Time // read-only

	mu    sync.Mutex
	table map[key]bucket
	stats Stats
}

// New returns a Limiter that lets each source send burst messages at once
// and then rate messages per second, tracking at most maxEntries sources;
// for example New(20, 5, 65536, time.Now). now is the clock (nil means
// time.Now).
//
// Out-of-range arguments are clamped rather than rejected: burst and
// maxEntries below 1 become 1, and a negative or NaN rate becomes 0 (no
// refill: each source gets only its burst until GC drops it).
func New(rate float64, burst int, maxEntries int, now func() time.Time) *Limiter {
	if math.IsNaN(rate) || rate < 0 {
		rate = 0
	}
	burst = max(burst, 1)
	maxEntries = max(maxEntries, 1)
	if now == nil {
		now = time.Now
	}
	// The time a bucket takes to refill from empty: after that an idle
	// entry is equivalent to no entry, so GC may drop it without giving
	// anyone extra tokens.
	idle := maxIdle
	if refill := float64(burst) / rate; refill < maxIdle.Seconds() { // +Inf when rate is 0
		idle = max(time.Duration(refill*float64(time.Second)), minIdle)
	}
	return &Limiter{
		rate:       rate,
		burst:      float64(burst),
		maxEntries: maxEntries,
		idle:       idle,
		now:        now,
		table:      make(map[key]bucket),
	}
}

// Allow reports whether a message from ip may be processed now, and if so
// takes a token from ip's bucket. An invalid ip is always refused.
func (l *Limiter) Allow(ip netip.Addr) bool {
	return l.Take(ip) == Allowed
}

// Verdict is what Take decided.
type Verdict uint8

const (
	// Allowed: the source had a token; one was taken.
	Allowed Verdict = iota
	// Limited: the source is tracked and its bucket is empty.
	Limited
	// Untracked: ip is invalid; nothing is known about its rate.
	Untracked
)

// Take is Allow telling a source over its rate (Limited) from an invalid
// address (Untracked), so that callers can punish only the former.
func (l *Limiter) Take(ip netip.Addr) Verdict {
	if !ip.IsValid() {
		return Untracked
	}
	k := keyOf(ip)
	now := l.now()

	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.table[k]
	if !ok {
		if len(l.table) >= l.maxEntries {
			l.evict(now)
		}
		b = bucket{tokens: l.burst, last: now}
	} else if elapsed := now.Sub(b.last); elapsed > 0 {
		// Concurrent callers may read the clock in one order and take
		// the lock in another; a timestamp older than last adds
		// nothing and does not move last back.
		b.tokens = min(l.burst, b.tokens+elapsed.Seconds()*l.rate)
		b.last = now
	}
	v := Allowed
	if b.tokens >= 1 {
		b.tokens--
	} else {
		v = Limited
		l.stats.Limited++
	}
	l.table[k] = b
	return v
}

// evict forgets one source: of evictSample sampled ones (map iteration
// starts at a random place), the one with the most tokens at now. Called
// with mu held.
func (l *Limiter) evict(now time.Time) {
	var victim key
	best, n := -1.0, 0
	for k, b := range l.table {
		tokens := b.tokens
		if elapsed := now.Sub(b.last); elapsed > 0 {
			tokens = min(l.burst, tokens+elapsed.Seconds()*l.rate)
		}
		if tokens > best {
			victim, best = k, tokens
		}
		if n++; n == evictSample {
			break
		}
	}
	delete(l.table, victim)
	l.stats.Evicted++
}

// GC drops the sources that have been idle long enough for their bucket
// to refill completely (burst/rate, but at least 1 s and at most 1 h), so
// forgetting them changes nothing for sources below the limit. Call it
// periodically, for example every few seconds.
func (l *Limiter) GC() {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	for k, b := range l.table {
		if now.Sub(b.last) >= l.idle {
			delete(l.table, k)
		}
	}
}

// Len returns the number of sources currently tracked.
func (l *Limiter) Len() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.table)
}

// Stats returns the refusal counters since the Limiter was created.
func (l *Limiter) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stats
}
