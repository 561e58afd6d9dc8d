package fq

import (
	"slices"
	"testing"
	"time"
)

// harness is a Queue over slots handed out from a free list, the way the
// router uses it, recording what was dropped.
type harness struct {
	t     testing.TB
	q     *Queue
	free  []int32
	flow  []uint64 // flow of each slot while queued
	drops map[Reason][]uint64
	// quiet stops recording drops (which allocates) for the
	// allocation test.
	quiet bool
}

func newHarness(t testing.TB, cfg Config) *harness {
	h := &harness{t: t, drops: map[Reason][]uint64{}}
	cfg.Drop = func(s int32, why Reason) {
		if !h.quiet {
			h.drops[why] = append(h.drops[why], h.flow[s])
		}
		h.free = append(h.free, s)
	}
	q, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h.q = q
	h.flow = make([]uint64, cfg.Packets)
	for i := cfg.Packets - 1; i >= 0; i-- {
		h.free = append(h.free, int32(i))
	}
	return h
}

func (h *harness) enqueue(flow uint64, size int, ect bool, now int64) {
	h.t.Helper()
	if len(h.free) == 0 {
		h.t.Fatalf("no free slot for flow %d", flow)
	}
	s := h.free[len(h.free)-1]
	h.free = h.free[:len(h.free)-1]
	h.flow[s] = flow
	h.q.Enqueue(s, flow, size, ect, now)
}

// dequeue returns the flows of up to n packets, in order, and whether
// each was marked.
func (h *harness) dequeue(n int, now int64) (flows []uint64, marks []bool) {
	for range n {
		s, mark, ok := h.q.Dequeue(now)
		if !ok {
			break
		}
		flows = append(flows, h.flow[s])
		marks = append(marks, mark)
		h.free = append(h.free, s)
	}
	return flows, marks
}

func TestNewRejects(t *testing.T) {
	drop := func(int32, Reason) {}
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"no packets", Config{Drop: drop}},
		{"no drop", Config{Packets: 8}},
		{"too many flows", Config{Packets: 8, Flows: 1 << 21, Drop: drop}},
	} {
		if _, err := New(c.cfg); err == nil {
			t.Errorf("%s: New accepted %+v", c.name, c.cfg)
		}
	}
	q, err := New(Config{Packets: 8, Flows: 1000, Drop: drop})
	if err != nil {
		t.Fatal(err)
	}
	if got := q.Config().Flows; got != 1024 {
		t.Errorf("Flows rounded to %d, want 1024", got)
	}
}

func TestOrderAndFairness(t *testing.T) {
	const ms = int64(time.Millisecond)
	for _, c := range []struct {
		name    string
		quantum int
		// enqueue: flow, size, count, in this order
		in   [][3]int
		want []uint64 // flows in dequeue order
	}{
		{
			name:    "one flow keeps its order",
			quantum: 3000,
			in:      [][3]int{{1, 1000, 5}},
			want:    []uint64{1, 1, 1, 1, 1},
		},
		{
			name: "a sparse flow after a bulk backlog goes first",
			// The bulk flow's 10 packets were there first; the ping
			// arrives last and leaves after one quantum of bulk.
			quantum: 3000,
			in:      [][3]int{{1, 1500, 10}, {2, 84, 1}},
			want:    []uint64{1, 1, 2, 1, 1, 1, 1, 1, 1, 1, 1},
		},
		{
			name:    "two bulk flows share by quantum",
			quantum: 3000,
			in:      [][3]int{{1, 1500, 6}, {2, 1500, 6}},
			want:    []uint64{1, 1, 2, 2, 1, 1, 2, 2, 1, 1, 2, 2},
		},
		{
			name: "bytes not packets: small packets get as many bytes",
			// Flow 2 sends 500-byte packets: six of them per
			// 3000-byte turn against two of flow 1's.
			quantum: 3000,
			in:      [][3]int{{1, 1500, 4}, {2, 500, 12}},
			want:    []uint64{1, 1, 2, 2, 2, 2, 2, 2, 1, 1, 2, 2, 2, 2, 2, 2},
		},
		{
			name:    "flows in one bucket share its FIFO",
			quantum: 3000,
			in:      [][3]int{{3, 1000, 2}, {3 + 64, 1000, 2}},
			want:    []uint64{3, 3, 67, 67},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, Config{Packets: 64, Flows: 64, Quantum: c.quantum})
			for _, e := range c.in {
				for range e[2] {
					h.enqueue(uint64(e[0]), e[1], false, 0)
				}
			}
			// Dequeue at once: nothing is old enough for CoDel.
			got, _ := h.dequeue(100, ms/10)
			if !slices.Equal(got, c.want) {
				t.Errorf("order %v, want %v", got, c.want)
			}
			if h.q.Len() != 0 || h.q.Bytes() != 0 || len(h.drops) != 0 {
				t.Errorf("left %d packets, %d bytes, drops %v", h.q.Len(), h.q.Bytes(), h.drops)
			}
		})
	}
}

// A sparse flow waits behind at most one quantum of a bulk flow, however
// long the bulk backlog, and each packet of it is new again.
func TestSparseFlowLatency(t *testing.T) {
	h := newHarness(t, Config{Packets: 1024, Flows: 1024, Quantum: 4 * 1500})
	for range 900 {
		h.enqueue(7, 1500, false, 0)
	}
	for round := range 5 {
		h.enqueue(9, 84, false, 0)
		got, _ := h.dequeue(10, int64(time.Microsecond))
		at := slices.Index(got, 9)
		if at < 0 || at > 4 {
			t.Fatalf("round %d: ping left at position %d of %v, want within one quantum (4 packets)", round, at, got)
		}
		for range len(got) - 1 {
			h.enqueue(7, 1500, false, 0)
		}
	}
}

func TestOverflowDropsFromFattest(t *testing.T) {
	h := newHarness(t, Config{Packets: 16, Bytes: 10 * 1000, Flows: 16})
	for range 9 {
		h.enqueue(1, 1000, false, 0)
	}
	h.enqueue(2, 500, false, 0)
	h.enqueue(2, 500, false, 0) // 10,000 bytes: at the bound, nothing dropped
	if len(h.drops) != 0 {
		t.Fatalf("drops at the bound: %v", h.drops)
	}
	h.enqueue(2, 500, false, 0) // over: flow 1 holds the most
	if got := h.drops[Overflow]; !slices.Equal(got, []uint64{1}) {
		t.Fatalf("overflow drops %v, want [1]", got)
	}
	if h.q.Bytes() != 9500 || h.q.Len() != 11 {
		t.Fatalf("queue %d bytes %d packets, want 9500, 11", h.q.Bytes(), h.q.Len())
	}
	// Reserve makes room for a read of 8 slots: 16-8 = 8 may stay.
	if n := h.q.Reserve(8); n != 3 || h.q.Len() != 8 {
		t.Fatalf("Reserve(8) dropped %d, left %d; want 3, 8", n, h.q.Len())
	}
	if st := h.q.Stats(); st.Dropped[Overflow] != 4 || st.Enqueued != 12 {
		t.Errorf("stats %+v", st)
	}
	// The head of flow 1 went, so the first of flow 1 left is its 5th.
	flows, _ := h.dequeue(100, 1)
	if want := []uint64{1, 1, 1, 1, 1, 2, 2, 2}; !slices.Equal(flows, want) {
		t.Errorf("left %v, want %v", flows, want)
	}
}

func TestDropFattestOlder(t *testing.T) {
	h := newHarness(t, Config{Packets: 8, Flows: 8})
	h.enqueue(1, 1000, false, 100)
	h.enqueue(2, 100, false, 0)
	if h.q.DropFattestOlder(150, 100) {
		t.Fatal("dropped a head younger than the age")
	}
	if !h.q.DropFattestOlder(200, 100) || !slices.Equal(h.drops[Overflow], []uint64{1}) {
		t.Fatalf("drops %v, want flow 1's head", h.drops[Overflow])
	}
}

func TestMaxDelay(t *testing.T) {
	h := newHarness(t, Config{Packets: 8, Flows: 8, MaxDelay: 50 * time.Millisecond, Interval: time.Second})
	h.enqueue(1, 100, false, 0)
	h.enqueue(1, 100, false, int64(40*time.Millisecond))
	flows, _ := h.dequeue(8, int64(60*time.Millisecond))
	if !slices.Equal(flows, []uint64{1}) || !slices.Equal(h.drops[Expired], []uint64{1}) {
		t.Errorf("dequeued %v, expired %v; want [1] and [1]", flows, h.drops[Expired])
	}
}

// codelRun feeds one flow at arrival per ms and serves serve per ms for
// dur ms, and returns the drops (or marks) and the final delay of the
// last packet dequeued.
func codelRun(t *testing.T, ecn, ect bool, arrive, serve int, dur int) (dropped, marked int, delay time.Duration) {
	const ms = int64(time.Millisecond)
	h := newHarness(t, Config{Packets: 4096, Bytes: 1 << 30, Flows: 16, Target: 2 * time.Millisecond, Interval: 20 * time.Millisecond, ECN: ecn, MaxDelay: time.Hour})
	enq := map[int32]int64{}
	for now := int64(0); now < int64(dur)*ms; now += ms {
		for range arrive {
			s := h.free[len(h.free)-1]
			h.enqueue(1, 1400, ect, now)
			enq[s] = now
		}
		for range serve {
			s, mark, ok := h.q.Dequeue(now)
			if !ok {
				break
			}
			if mark {
				marked++
			}
			delay = time.Duration(now - enq[s])
			h.free = append(h.free, s)
		}
	}
	return len(h.drops[CoDel]), marked, delay
}

func TestCoDel(t *testing.T) {
	for _, c := range []struct {
		name           string
		ecn, ect       bool
		arrive, serve  int
		wantDrops      bool
		wantMarks      bool
		maxFinalDelayM int // ms
	}{
		// Served as fast as it comes: no standing queue, no drops.
		{name: "keeps up", arrive: 4, serve: 4, maxFinalDelayM: 1},
		// Twice as fast as served: the queue grows, CoDel drops.
		{name: "overloaded drops", arrive: 8, serve: 4, wantDrops: true},
		{name: "overloaded ECT with ECN marks", ecn: true, ect: true, arrive: 8, serve: 4, wantMarks: true},
		{name: "overloaded not-ECT with ECN drops", ecn: true, arrive: 8, serve: 4, wantDrops: true},
		{name: "overloaded ECT without ECN drops", ect: true, arrive: 8, serve: 4, wantDrops: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, m, delay := codelRun(t, c.ecn, c.ect, c.arrive, c.serve, 500)
			if (d > 0) != c.wantDrops || (m > 0) != c.wantMarks {
				t.Errorf("drops %d marks %d; want drops %v marks %v", d, m, c.wantDrops, c.wantMarks)
			}
			if c.maxFinalDelayM > 0 && delay > time.Duration(c.maxFinalDelayM)*time.Millisecond {
				t.Errorf("final delay %v", delay)
			}
		})
	}
}

// With a sender that backs off on drops the way TCP does (halves its rate
// on a drop, adds a little per ms otherwise), CoDel holds the delay near
// its target instead of letting the queue grow.
func TestCoDelControlsResponsiveSender(t *testing.T) {
	const ms = int64(time.Millisecond)
	h := newHarness(t, Config{Packets: 8192, Bytes: 1 << 30, Flows: 16, Target: 2 * time.Millisecond, Interval: 20 * time.Millisecond, MaxDelay: time.Hour})
	enq := make([]int64, 8192)
	rate, serve := 4.0, 10
	var delays []time.Duration
	for now := int64(0); now < 3000*ms; now += ms {
		before := len(h.drops[CoDel])
		for range int(rate) {
			s := h.free[len(h.free)-1]
			h.enqueue(1, 1400, false, now)
			enq[s] = now
		}
		for range serve {
			s, _, ok := h.q.Dequeue(now)
			if !ok {
				break
			}
			if now > 1000*ms {
				delays = append(delays, time.Duration(now-enq[s]))
			}
			h.free = append(h.free, s)
		}
		if len(h.drops[CoDel]) > before {
			rate = max(rate/2, 1)
		} else {
			rate += 0.2
		}
	}
	slices.Sort(delays)
	p50 := delays[len(delays)/2]
	if p50 > 10*time.Millisecond {
		t.Errorf("delay p50 %v after settling, want near the 2 ms target", p50)
	}
	if len(h.drops[CoDel]) == 0 {
		t.Error("no drops")
	}
}

func TestFlush(t *testing.T) {
	h := newHarness(t, Config{Packets: 8, Flows: 8})
	for f := range 5 {
		h.enqueue(uint64(f), 100, false, 0)
	}
	h.q.Flush()
	if h.q.Len() != 0 || h.q.Bytes() != 0 || len(h.drops[Flushed]) != 5 || len(h.free) != 8 {
		t.Fatalf("after Flush: len %d bytes %d flushed %d free %d", h.q.Len(), h.q.Bytes(), len(h.drops[Flushed]), len(h.free))
	}
	// Usable again.
	h.enqueue(3, 100, false, 0)
	if flows, _ := h.dequeue(8, 1); !slices.Equal(flows, []uint64{3}) {
		t.Errorf("after Flush dequeued %v", flows)
	}
}

func TestEnqueueTwicePanics(t *testing.T) {
	q, _ := New(Config{Packets: 4, Drop: func(int32, Reason) {}})
	q.Enqueue(1, 0, 100, false, 0)
	defer func() {
		if recover() == nil {
			t.Error("no panic")
		}
	}()
	q.Enqueue(1, 0, 100, false, 0)
}

// Enqueue and Dequeue allocate nothing, drops included.
func TestZeroAllocs(t *testing.T) {
	h := newHarness(t, Config{Packets: 256, Bytes: 64 * 1400, Flows: 64, Quantum: 3000})
	h.quiet = true
	var now int64
	allocs := testing.AllocsPerRun(1000, func() {
		for f := range 8 {
			s := h.free[len(h.free)-1]
			h.free = h.free[:len(h.free)-1]
			h.q.Enqueue(s, uint64(f*f), 1400, f%2 == 0, now)
		}
		for range 7 {
			if s, _, ok := h.q.Dequeue(now); ok {
				h.free = append(h.free, s)
			}
		}
		now += int64(time.Millisecond)
	})
	if allocs != 0 {
		t.Errorf("%v allocations per run", allocs)
	}
	// Make sure the drop paths ran, so the test covered them.
	if h.q.Stats().Dropped[Overflow]+h.q.Stats().Dropped[CoDel] == 0 {
		t.Error("no drops exercised")
	}
}
