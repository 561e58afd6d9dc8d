package setupqueue

import (
	"bytes"
	"sync"
	"testing"
)

// TestQueue: packets come out in the order they went in, copied (the
// caller reuses its buffer); a full queue and an oversize packet are
// refused; Busy holds while packets are queued or being drained; Clear
// empties it.
func TestQueue(t *testing.T) {
	var q Queue
	q.Init(3, 4)
	if q.Busy() || q.Len() != 0 {
		t.Fatalf("new queue: busy %v, len %d", q.Busy(), q.Len())
	}
	buf := []byte{1, 1}
	for i := range 3 {
		buf[0], buf[1] = byte(i), byte(i)
		if !q.Push(buf) {
			t.Fatalf("push %d refused below capacity", i)
		}
	}
	if q.Push([]byte{9}) {
		t.Error("push into a full queue accepted")
	}
	if !q.Busy() || q.Len() != 3 {
		t.Errorf("full queue: busy %v, len %d", q.Busy(), q.Len())
	}
	var got [][]byte
	n := q.Drain(func(pkt []byte) {
		if !q.Busy() {
			t.Error("not busy while draining: a packet sent around the queue could overtake this one")
		}
		got = append(got, bytes.Clone(pkt))
	})
	if n != 3 || len(got) != 3 {
		t.Fatalf("drained %d (%d seen), want 3", n, len(got))
	}
	for i, p := range got {
		if !bytes.Equal(p, []byte{byte(i), byte(i)}) {
			t.Errorf("packet %d = %v, want [%d %d]: out of order or not copied", i, p, i, i)
		}
	}
	if q.Busy() || q.Len() != 0 {
		t.Errorf("drained queue: busy %v, len %d", q.Busy(), q.Len())
	}
	if q.Push([]byte{1, 2, 3, 4, 5}) {
		t.Error("a packet larger than a slot was accepted")
	}
	// The ring wraps: after a drain, pushes start over at the head.
	for i := range 2 {
		q.Push([]byte{byte(10 + i)})
	}
	q.Drain(func([]byte) {})
	q.Push([]byte{20})
	q.Push([]byte{21})
	if n := q.Clear(); n != 2 || q.Busy() || q.Len() != 0 {
		t.Errorf("clear: %d packets, busy %v, len %d; want 2, false, 0", n, q.Busy(), q.Len())
	}
	if n := testing.AllocsPerRun(100, func() { q.Push([]byte{7}); q.Drain(func([]byte) {}) }); n != 0 {
		t.Errorf("push and drain with slots allocated: %.1f allocations", n)
	}
}

// TestQueueConcurrent: pushes from many goroutines and drains beside
// them lose nothing and never exceed the bound.
func TestQueueConcurrent(t *testing.T) {
	var q Queue
	q.Init(64, 8)
	var wg sync.WaitGroup
	var mu sync.Mutex
	pushed, drained := 0, 0
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if q.Push([]byte{byte(g), byte(i)}) {
					mu.Lock()
					pushed++
					mu.Unlock()
				}
			}
		})
	}
	wg.Go(func() {
		for range 100 {
			n := q.Drain(func([]byte) {})
			if n > 64 {
				t.Errorf("drained %d, over the bound", n)
			}
			mu.Lock()
			drained += n
			mu.Unlock()
		}
	})
	wg.Wait()
	drained += q.Clear()
	if pushed != drained || pushed == 0 {
		t.Errorf("pushed %d, drained %d", pushed, drained)
	}
}
