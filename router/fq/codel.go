package fq

import "math"

// codel is one bucket's CoDel state (RFC 8289), as Linux's codel_vars.
type codel struct {
	count, lastCount uint32
	dropping         bool
	firstAbove       int64 // when the delay may first count as standing; 0: below target
	dropNext         int64
}

// lonePacket is the bucket backlog (bytes left behind the packet
// considered) at or below which CoDel never drops: one packet alone is
// not a standing queue.
const lonePacket = 1500

// codelDequeue takes the next packet of b, after CoDel's drops (and
// MaxDelay's), as Linux's codel_dequeue. It returns none when b is empty.
func (q *Queue) codelDequeue(b *bucket, now int64) (int32, bool) {
	s := q.take(b, now)
	c := &b.codel
	if s == none {
		c.dropping = false
		return none, false
	}
	drop := q.shouldDrop(s, b, now)
	switch {
	case c.dropping && !drop:
		c.dropping = false
	case c.dropping && now >= c.dropNext:
		// Time for the next drop; a large backlog may need several now.
		for c.dropping && now >= c.dropNext {
			c.count++
			if q.cfg.ECN && q.slots[s].ect {
				c.dropNext = q.controlLaw(c.dropNext, c.count)
				return s, true
			}
			q.cfg.Drop(s, CoDel)
			q.stats.Dropped[CoDel]++
			if s = q.take(b, now); s == none || !q.shouldDrop(s, b, now) {
				c.dropping = false
			} else {
				c.dropNext = q.controlLaw(c.dropNext, c.count)
			}
		}
	case drop:
		mark := false
		if q.cfg.ECN && q.slots[s].ect {
			mark = true
		} else {
			q.cfg.Drop(s, CoDel)
			q.stats.Dropped[CoDel]++
			if s = q.take(b, now); s != none {
				q.shouldDrop(s, b, now)
			}
		}
		c.dropping = true
		// Back above the target soon after leaving the dropping
		// state: start from the drop rate that controlled it then.
		if delta := c.count - c.lastCount; delta > 1 && now-c.dropNext < 16*q.intv {
			c.count = delta
		} else {
			c.count = 1
		}
		c.lastCount = c.count
		c.dropNext = q.controlLaw(now, c.count)
		if mark {
			return s, true
		}
	}
	return s, false
}

// take pops b's head, first dropping packets older than MaxDelay. It
// returns none when b is empty.
func (q *Queue) take(b *bucket, now int64) int32 {
	for b.head != none {
		s := q.pop(b)
		if now-q.slots[s].enq <= q.maxAge {
			return s
		}
		q.cfg.Drop(s, Expired)
		q.stats.Dropped[Expired]++
	}
	return none
}

// shouldDrop is Linux's codel_should_drop for the packet s just taken
// from b.
func (q *Queue) shouldDrop(s int32, b *bucket, now int64) bool {
	c := &b.codel
	if now-q.slots[s].enq < q.target || b.bytes <= lonePacket {
		c.firstAbove = 0
		return false
	}
	if c.firstAbove == 0 {
		c.firstAbove = now + q.intv
		return false
	}
	return now > c.firstAbove
}

// controlLaw is when the next drop is due: interval/sqrt(count) after t.
func (q *Queue) controlLaw(t int64, count uint32) int64 {
	return t + int64(float64(q.intv)/math.Sqrt(float64(count)))
}
