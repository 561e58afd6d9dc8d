package flooder

import "time"

// tokenBucket paces the flooder: rate tokens per second accumulate up to
// burst, and a datagram costs one. A flooder that falls behind (not given
// the CPU) loses what exceeds burst instead of catching up later.
type tokenBucket struct {
	rate, burst, tokens float64
	last                time.Time
	// lost counts the tokens that overflowed burst: datagrams not sent
	// because the flooder was not running when they were due.
	lost float64
}

func newTokenBucket(rate, burst float64, now time.Time) *tokenBucket {
	return &tokenBucket{rate: rate, burst: burst, last: now}
}

func (b *tokenBucket) refill(now time.Time) {
	if dt := now.Sub(b.last).Seconds(); dt > 0 {
		b.tokens += dt * b.rate
		if b.tokens > b.burst {
			b.lost += b.tokens - b.burst
			b.tokens = b.burst
		}
	}
	b.last = now
}

// take removes up to n tokens and returns how many it removed.
func (b *tokenBucket) take(now time.Time, n int) int {
	b.refill(now)
	k := min(n, int(b.tokens))
	b.tokens -= float64(k)
	return k
}

// wait is how long until n tokens are there.
func (b *tokenBucket) wait(n int) time.Duration {
	if b.tokens >= float64(n) {
		return 0
	}
	return time.Duration((float64(n) - b.tokens) / b.rate * float64(time.Second))
}
