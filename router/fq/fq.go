package fq

import (
	"errors"
	"fmt"
	"math/bits"
	"time"
)

// Reason says why a packet left the queue without being dequeued.
type Reason uint8

const (
	// Overflow: the queue was over Config.Bytes or out of slots, and the
	// packet was at the head of the bucket holding the most bytes.
	Overflow Reason = iota
	// CoDel: its bucket's delay stayed above the target for an interval
	// (and the packet could not be ECN-marked instead).
	CoDel
	// Expired: it waited longer than Config.MaxDelay.
	Expired
	// Flushed: Flush emptied the queue.
	Flushed
	numReasons
)

func (r Reason) String() string {
	switch r {
	case Overflow:
		return "overflow"
	case CoDel:
		return "codel"
	case Expired:
		return "expired"
	case Flushed:
		return "flushed"
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// Defaults of Config's zero fields.
const (
	DefaultFlows    = 1024
	DefaultQuantum  = 16 * 1514
	DefaultTarget   = 2 * time.Millisecond
	DefaultInterval = 20 * time.Millisecond
	DefaultMaxDelay = 100 * time.Millisecond
)

// Config sizes a Queue. Packets and Drop are required.
type Config struct {
	// Packets is how many packets the queue holds at most: the caller's
	// slots are 0 to Packets-1.
	Packets int
	// Bytes bounds the bytes held in all buckets together (default
	// Packets × 1500).
	Bytes int
	// Flows is the number of buckets, rounded up to a power of two
	// (default DefaultFlows).
	Flows int
	// Quantum is the bytes a bucket may send per round robin turn
	// (default DefaultQuantum, 16 full-size packets).
	Quantum int
	// Target and Interval are CoDel's: the acceptable standing delay of a
	// bucket, and how long it may stay above it before the first drop.
	Target, Interval time.Duration
	// MaxDelay drops any packet that waited longer (default
	// DefaultMaxDelay).
	MaxDelay time.Duration
	// ECN: when CoDel would drop a packet enqueued as ECN-capable, hand
	// it out with mark set instead.
	ECN bool
	// Drop receives every packet that leaves without being dequeued,
	// during the call that dropped it.
	Drop func(slot int32, why Reason)
}

const none = -1

// slot is one queued packet.
type slot struct {
	enq  int64 // enqueue time, caller's monotonic nanoseconds
	next int32 // next slot of the same bucket, or none
	size int32
	ect  bool
	used bool
}

// list membership of a bucket.
const (
	inNone uint8 = iota
	inNew
	inOld
)

// bucket is one flow queue with its round robin and CoDel state.
type bucket struct {
	head, tail int32 // slots, none when empty
	bytes      int
	deficit    int
	next       int32 // next bucket in its list
	list       uint8
	codel      codel
}

// ring is a singly linked list of buckets.
type ring struct{ head, tail int32 }

// Queue is a fair queue with CoDel. See the package documentation.
type Queue struct {
	cfg     Config
	mask    uint64
	target  int64
	intv    int64
	maxAge  int64
	slots   []slot
	buckets []bucket
	newList ring
	oldList ring

	packets, bytes int
	stats          Stats
}

// Stats are a Queue's counters since New.
type Stats struct {
	Enqueued, Dequeued uint64
	Marked             uint64 // dequeued with mark set
	Dropped            [numReasons]uint64
}

// New returns an empty Queue for cfg, with every array it will use.
func New(cfg Config) (*Queue, error) {
	if cfg.Packets <= 0 || cfg.Packets > 1<<30 {
		return nil, fmt.Errorf("fq: Packets %d out of range", cfg.Packets)
	}
	if cfg.Drop == nil {
		return nil, errors.New("fq: Drop is required")
	}
	if cfg.Bytes <= 0 {
		cfg.Bytes = cfg.Packets * 1500
	}
	if cfg.Flows <= 0 {
		cfg.Flows = DefaultFlows
	}
	if cfg.Flows > 1<<20 {
		return nil, fmt.Errorf("fq: Flows %d out of range", cfg.Flows)
	}
	cfg.Flows = 1 << bits.Len(uint(cfg.Flows-1))
	if cfg.Quantum <= 0 {
		cfg.Quantum = DefaultQuantum
	}
	if cfg.Target <= 0 {
		cfg.Target = DefaultTarget
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.MaxDelay <= 0 {
		cfg.MaxDelay = DefaultMaxDelay
	}
	q := &Queue{
		cfg:     cfg,
		mask:    uint64(cfg.Flows - 1),
		target:  int64(cfg.Target),
		intv:    int64(cfg.Interval),
		maxAge:  int64(cfg.MaxDelay),
		slots:   make([]slot, cfg.Packets),
		buckets: make([]bucket, cfg.Flows),
		newList: ring{none, none},
		oldList: ring{none, none},
	}
	for i := range q.buckets {
		q.buckets[i] = bucket{head: none, tail: none, next: none}
	}
	return q, nil
}

// Len is the number of packets queued.
func (q *Queue) Len() int { return q.packets }

// Bytes is the number of bytes queued.
func (q *Queue) Bytes() int { return q.bytes }

// Stats returns the counters.
func (q *Queue) Stats() Stats { return q.stats }

// Config returns the configuration with defaults filled in.
func (q *Queue) Config() Config { return q.cfg }

// Enqueue queues the packet in slot s: size bytes of the flow with hash
// flow, ECN-capable when ect, at time now. The slot must be free (not
// queued). If the queue is then over its byte bound, packets are dropped
// from the head of the fullest bucket (possibly this one) until it is
// not. It panics on a slot out of range or already queued: the caller's
// bookkeeping is broken.
func (q *Queue) Enqueue(s int32, flow uint64, size int, ect bool, now int64) {
	sl := &q.slots[s]
	if sl.used {
		panic(fmt.Sprintf("fq: slot %d enqueued twice", s))
	}
	*sl = slot{enq: now, next: none, size: int32(size), ect: ect, used: true}
	bi := int32(flow & q.mask)
	b := &q.buckets[bi]
	if b.tail == none {
		b.head = s
	} else {
		q.slots[b.tail].next = s
	}
	b.tail = s
	b.bytes += size
	q.packets++
	q.bytes += size
	q.stats.Enqueued++
	if b.list == inNone {
		b.deficit = q.cfg.Quantum
		q.push(&q.newList, bi)
		b.list = inNew
	}
	for q.bytes > q.cfg.Bytes {
		q.DropFattest()
	}
}

// Reserve drops from the fullest buckets until at most Packets-n slots
// are queued, so that n more can be enqueued (the reader makes room for
// a whole read before it reads). It returns how many it dropped.
func (q *Queue) Reserve(n int) int {
	dropped := 0
	for q.packets > 0 && q.packets+n > q.cfg.Packets {
		q.DropFattest()
		dropped++
	}
	return dropped
}

// DropFattest drops the head packet of the bucket holding the most bytes
// and reports whether there was one. It scans every bucket: it is for
// overflow, not for every packet.
func (q *Queue) DropFattest() bool { return q.DropFattestOlder(0, 0) }

// DropFattestOlder is DropFattest for a head packet that has waited at
// least age at now; it drops nothing, and returns false, when the fullest
// bucket's head is younger. A caller that can wait for the queue to drain
// uses it to drop only when waiting would not help: a full queue of
// young packets is a burst, one of old packets a flow that does not back
// off.
func (q *Queue) DropFattestOlder(now, age int64) bool {
	if q.packets == 0 {
		return false
	}
	best, most := int32(none), 0
	for i := range q.buckets {
		if q.buckets[i].bytes > most {
			best, most = int32(i), q.buckets[i].bytes
		}
	}
	if best == none { // only empty packets queued
		for i := range q.buckets {
			if q.buckets[i].head != none {
				best = int32(i)
				break
			}
		}
	}
	b := &q.buckets[best]
	if age > 0 && now-q.slots[b.head].enq < age {
		return false
	}
	q.cfg.Drop(q.pop(b), Overflow)
	q.stats.Dropped[Overflow]++
	return true
}

// Dequeue returns the next packet to send, in fair order, and whether
// there was one. mark asks the caller to set the packet's ECN field to CE
// (MarkCE) before sending it. Packets CoDel or MaxDelay drop on the way
// go to Config.Drop.
func (q *Queue) Dequeue(now int64) (s int32, mark bool, ok bool) {
	for {
		l := &q.newList
		if l.head == none {
			l = &q.oldList
			if l.head == none {
				return none, false, false
			}
		}
		bi := l.head
		b := &q.buckets[bi]
		if b.deficit <= 0 {
			b.deficit += q.cfg.Quantum
			q.shift(l)
			q.push(&q.oldList, bi)
			b.list = inOld
			continue
		}
		s, mark = q.codelDequeue(b, now)
		if s == none {
			// Empty: a new bucket goes behind the old ones once
			// (RFC 8290 section 4.2), an old one leaves the lists.
			q.shift(l)
			if l == &q.newList && q.oldList.head != none {
				q.push(&q.oldList, bi)
				b.list = inOld
			} else {
				b.list = inNone
				b.next = none
			}
			continue
		}
		b.deficit -= int(q.slots[s].size)
		q.stats.Dequeued++
		if mark {
			q.stats.Marked++
		}
		return s, mark, true
	}
}

// Flush drops every queued packet (reason Flushed).
func (q *Queue) Flush() {
	for i := range q.buckets {
		b := &q.buckets[i]
		for b.head != none {
			q.cfg.Drop(q.pop(b), Flushed)
			q.stats.Dropped[Flushed]++
		}
		*b = bucket{head: none, tail: none, next: none}
	}
	q.newList, q.oldList = ring{none, none}, ring{none, none}
}

// pop removes and returns the head slot of a non-empty bucket.
func (q *Queue) pop(b *bucket) int32 {
	s := b.head
	sl := &q.slots[s]
	b.head = sl.next
	if b.head == none {
		b.tail = none
	}
	b.bytes -= int(sl.size)
	q.packets--
	q.bytes -= int(sl.size)
	sl.used = false
	return s
}

func (q *Queue) push(l *ring, bi int32) {
	q.buckets[bi].next = none
	if l.tail == none {
		l.head = bi
	} else {
		q.buckets[l.tail].next = bi
	}
	l.tail = bi
}

// shift removes the head of a non-empty list.
func (q *Queue) shift(l *ring) {
	bi := l.head
	l.head = q.buckets[bi].next
	if l.head == none {
		l.tail = none
	}
	q.buckets[bi].next = none
}
