package setupqueue

import (
	"sync"
	"sync/atomic"
)

// Queue holds packets for one peer while its session is being set up.
//
// It is a bounded ring of preallocated slots: enqueueing copies the packet
// into a slot (the TUN buffer is reused by the next read), and a full queue
// refuses the packet instead of growing. Slots are allocated on first use so
// peers that never queue cost nothing. Safe for concurrent use once Init
// has run (before the Queue is shared).
type Queue struct {
	mu       sync.Mutex
	slots    [][]byte
	sizes    []int
	head, n  int
	cap      int
	slotSize int
	// held is n, published for the lock-free check of Busy, except that
	// Drain clears it only after its last packet went out: while it is
	// not zero, a packet sent around the queue could overtake one in it.
	// Written under mu.
	held atomic.Int32
}

// Init sets the queue's bound: capacity packets of at most slotSize
// bytes each.
func (q *Queue) Init(capacity, slotSize int) {
	q.cap = capacity
	q.slotSize = slotSize
}

// Push copies pkt into the queue and reports whether there was room (and
// the packet fit a slot).
func (q *Queue) Push(pkt []byte) bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	if q.n == q.cap || len(pkt) > q.slotSize {
		return false
	}
	if q.slots == nil {
		q.slots = make([][]byte, q.cap)
		q.sizes = make([]int, q.cap)
	}
	i := (q.head + q.n) % q.cap
	if q.slots[i] == nil {
		q.slots[i] = make([]byte, q.slotSize)
	}
	q.sizes[i] = copy(q.slots[i], pkt)
	q.n++
	q.held.Store(int32(q.n))
	return true
}

// Drain calls f for each queued packet in order and empties the queue, and
// returns how many it held. f must not keep pkt after it returns. It
// holds the queue lock throughout, so a Push waits for the drain.
func (q *Queue) Drain(f func(pkt []byte)) int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.n
	for ; q.n > 0; q.n-- {
		i := q.head
		q.head = (q.head + 1) % q.cap
		f(q.slots[i][:q.sizes[i]])
	}
	q.head = 0
	q.held.Store(0)
	return n
}

// Clear empties the queue and returns how many packets it held.
func (q *Queue) Clear() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	n := q.n
	q.head, q.n = 0, 0
	q.held.Store(0)
	return n
}

// Len is how many packets are queued.
func (q *Queue) Len() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n
}

// Busy reports, without locking, whether packets are queued or still being
// drained: a sender must then queue behind them to keep the order.
func (q *Queue) Busy() bool { return q.held.Load() != 0 }
