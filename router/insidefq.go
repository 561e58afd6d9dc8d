package router

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/router/fq"
	"github.com/bridgehead/bridgehead/router/sparse"
	"github.com/bridgehead/bridgehead/tun"
)

// The inside path with a fair queue: the reader reads the TUN as fast as
// it can into a pool of packet slots and queues every packet in a
// per-flow fair queue (package fq: deficit round robin over the flow hash
// the gateway selector uses, CoDel per flow); the sealer takes at most
// sealBatch packets at a time out of it, in fair order, seals and sends
// them. A bulk flow's backlog so sits in our queue, where CoDel drops
// (or ECN-marks) at its head and a sparse flow overtakes it, instead of
// in the kernel's TUN ring in front of the reader, where every packet
// waits behind every other. A small packet waits for at most the batch
// being sealed.
//
// Measured before this (notes of #21): under one TCP stream the ping
// waited 2.4 ms (p50) between the TUN and the WAN at gateway A, nearly
// all of it in the ring while the reader sealed.
const (
	// sealBatch bounds the packets sealed and sent in one sendmmsg by
	// the sealer: what a small packet may wait behind.
	sealBatch = 64
	// fqSlotsPerRead is the pool's size in TUN reads: the pool holds
	// fqSlotsPerRead × BatchSize packets (the memory the 16 read slots of
	// the pipeline held before).
	fqSlotsPerRead = 16
)

// fqPipe is the inside path's state shared by the reader and the sealer.
type fqPipe struct {
	// mu guards q, free and sizes of queued slots. Held for a read's
	// enqueues or a batch's dequeues, never during I/O or sealing.
	mu    sync.Mutex
	q     *fq.Queue
	pool  [][]byte  // packet buffers by slot; never reallocated
	sizes []int     // packet length by slot: the reader writes it before Enqueue
	flows []uint64  // flow hash by slot, likewise
	free  []int32   // slots neither queued nor being read or sealed
	freed sync.Cond // signalled when slots go back to free; L is &mu

	// sealMu is held by whoever seals (the sealer goroutine, or the
	// reader for a packet after a quiet spell): it owns batch, bslots
	// and run.
	sealMu sync.Mutex
	batch  *insideBatch // the dequeued packets as route wants them
	bslots []int32
	run    *sealRun

	wake chan struct{} // the sealer has work; capacity 1
	lane *lane         // the TUN queue read and the socket sent on

	// The reader's own, reused for every read: frags is the lane's
	// fragment table (the reader hashes every packet it reads, in read
	// order). The reader also seals
	// the sparse flows' packets of a read itself (package sparse): xbatch
	// and xslots hold them, sparse sorts flows (nil: every flow is
	// queued; tests of the queue alone).
	frags  *flowhash.Table
	sparse *sparse.Flows
	xbatch *insideBatch
	xslots []int32
	rslots []int32
	rbufs  [][]byte
	rsizes []int
	rhash  []uint64
	rect   []bool
}

// newFQPipe allocates the pool, the queue and every buffer once.
func (r *Router) newFQPipe(l *lane) (*fqPipe, error) {
	bs := max(r.tun.BatchSize(), 1)
	n := fqSlotsPerRead * bs
	n = max(n, bs+sealBatch+bs) // a read and a batch out, and room to queue
	p := &fqPipe{
		pool:   make([][]byte, n),
		sizes:  make([]int, n),
		flows:  make([]uint64, n),
		free:   make([]int32, 0, n),
		bslots: make([]int32, sealBatch),
		batch:  &insideBatch{bufs: make([][]byte, sealBatch), sizes: make([]int, sealBatch), flows: make([]uint64, sealBatch)},
		run:    newSealRun(l.bind, sealBatch),
		lane:   l,
		frags:  r.flows.NewTable(),
		wake:   make(chan struct{}, 1),
		rslots: make([]int32, bs),
		rbufs:  make([][]byte, bs),
		rsizes: make([]int, bs),
		rhash:  make([]uint64, bs),
		rect:   make([]bool, bs),
		xbatch: &insideBatch{bufs: make([][]byte, bs), sizes: make([]int, bs), flows: make([]uint64, bs), express: true},
		xslots: make([]int32, 0, bs),
	}
	p.xbatch.run = newSealRun(l.bind, bs)
	if !r.express.steered {
		// Else the kernel sorts flows and the express lane reads the
		// sparse ones (express.go): what reaches this queue is bulk.
		p.sparse = new(sparse.Flows)
	}
	p.batch.run = p.run
	p.freed.L = &p.mu
	for i := range p.pool {
		p.pool[i] = make([]byte, r.set.bufSize)
	}
	for i := n - 1; i >= 0; i-- {
		p.free = append(p.free, int32(i))
	}
	q, err := fq.New(fq.Config{
		Packets:  n,
		Bytes:    n * r.set.mtu,
		ECN:      true,
		Target:   r.set.codelTarget,
		Interval: r.set.codelInterval,
		Drop:     p.dropped(r),
	})
	if err != nil {
		return nil, err
	}
	p.q = q
	return p, nil
}

// dropped is the queue's Drop: it counts the packet, frees its slot and
// wakes a reader waiting in take for slots (the sealer's pass may drop
// every packet it looks at, CoDel or MaxDelay, and then send nothing and
// give nothing back). It runs under p.mu.
func (p *fqPipe) dropped(r *Router) func(int32, fq.Reason) {
	return func(s int32, why fq.Reason) {
		r.drops.Add(Inside, fqReason(why), 1)
		p.free = append(p.free, s)
		p.freed.Signal()
	}
}

// insideLaneFQ reads plain packets from lane l's TUN queue into a fair
// queue of its own, and seals and sends them from it on l's socket, until
// the TUN is closed or fails for good. Lanes get disjoint flows (the
// kernel picks a flow's TUN queue by its hash), so per-lane queues are
// fair across all of them.
func (r *Router) insideLaneFQ(ctx context.Context, l *lane) error {
	p, err := r.newFQPipe(l)
	if err != nil {
		return err
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range p.wake {
			r.sealFQ(p)
		}
		r.sealFQ(p)
	}()
	err = r.readFQ(ctx, p)
	close(p.wake)
	<-done
	return err
}

// readFQ is the reader: it keeps a read's worth of slots free (dropping
// from the fullest flows when the queue is full), reads the TUN into
// them, and queues what it read.
func (r *Router) readFQ(ctx context.Context, p *fqPipe) error {
	failures := 0
	var last time.Time
	bs := len(p.rslots)
	for {
		k := r.take(p, bs)
		n, err := p.lane.tun.Read(p.rbufs[:k], p.rsizes[:k], bufHeadroom)
		if err != nil {
			if errors.Is(err, tun.ErrClosed) || ctx.Err() != nil {
				p.give(p.rslots[:k])
				return nil
			}
			// As readTUN: one bad read must not stop the gateway, a
			// device that only fails must.
			r.drops.Add(Inside, ReasonTUNReadError, 1)
			if failures++; failures >= maxConsecutiveErrors {
				if n > 0 {
					r.drops.Add(Inside, ReasonTUNReadError, uint64(n))
				}
				p.give(p.rslots[:k])
				return fmt.Errorf("TUN read failed %d times in a row: %w", failures, err)
			}
		} else {
			failures = 0
		}
		now := r.clock.Now()
		queued := r.enqueueRead(p, n, k, now)
		r.sealSparse(p, now)
		if queued == 0 {
			continue
		}
		quiet := now.Sub(last) > insideQuietGap
		last = now
		// After a quiet spell (an idle ping) seal at once, without
		// handing over to the sealer, if it is not busy.
		if quiet && p.sealMu.TryLock() {
			r.sealFQLocked(p)
			p.sealMu.Unlock()
			last = r.clock.Now()
			continue
		}
		select {
		case p.wake <- struct{}{}:
		default: // the sealer will look at the queue anyway
		}
	}
}

// take reserves n free slots for a read into p.rslots and p.rbufs. While
// fewer are free it drops the head of the fullest flow if that has waited
// longer than the CoDel target (a flow that does not back off must not
// hold the reader, and so every small packet, in the TUN's ring), and
// otherwise waits for the sealer to free slots (a burst of young packets
// is not dropped). It returns n.
func (r *Router) take(p *fqPipe, n int) int {
	p.mu.Lock()
	for len(p.free) < n {
		if p.q.DropFattestOlder(r.mono.ns(r.clock.Now()), int64(p.q.Config().Target)) {
			continue
		}
		select {
		case p.wake <- struct{}{}:
		default:
		}
		p.freed.Wait()
	}
	copy(p.rslots, p.free[len(p.free)-n:])
	p.free = p.free[:len(p.free)-n]
	p.mu.Unlock()
	for i, s := range p.rslots[:n] {
		p.rbufs[i] = p.pool[s]
	}
	return n
}

// enqueueRead queues the n packets read into the first n of the k slots
// taken, and frees the rest, except those of sparse flows, which it
// moves to p.xbatch for sealSparse. It returns how many it queued. Flow
// hashes and ECN are read outside the lock.
func (r *Router) enqueueRead(p *fqPipe, n, k int, now time.Time) int {
	ns := r.mono.ns(now)
	x := p.xbatch
	x.n, p.xslots = 0, p.xslots[:0]
	for i := range n {
		pkt := p.rbufs[i][bufHeadroom : bufHeadroom+p.rsizes[i]]
		p.rhash[i] = p.frags.Hash(pkt)
		p.rect[i] = fq.ECT(pkt)
		if p.sparse != nil && p.sparse.Sparse(p.rhash[i], p.rsizes[i], ns) {
			x.bufs[x.n], x.sizes[x.n], x.flows[x.n] = p.rbufs[i], p.rsizes[i], p.rhash[i]
			x.n++
			p.xslots = append(p.xslots, p.rslots[i])
			p.rsizes[i] = -1 // not queued
		}
	}
	p.mu.Lock()
	for i := range n {
		if p.rsizes[i] < 0 {
			continue
		}
		s := p.rslots[i]
		p.sizes[s] = p.rsizes[i]
		p.flows[s] = p.rhash[i]
		p.q.Enqueue(s, p.rhash[i], p.rsizes[i], p.rect[i], ns)
	}
	p.free = append(p.free, p.rslots[n:k]...)
	p.mu.Unlock()
	return n - x.n
}

// sealSparse seals and sends the sparse flows' packets of the last read
// (p.xbatch, from enqueueRead) at once, on the reader's goroutine, and
// frees their slots: they wait for no batch of the sealer's. The reader
// owns xbatch and its run; the sealer may send on the same socket
// meanwhile (binds are safe for concurrent use).
func (r *Router) sealSparse(p *fqPipe, now time.Time) {
	x := p.xbatch
	if x.n == 0 {
		return
	}
	x.run.now = r.mono.ns(now)
	r.route(x, x.n, now)
	r.flushInside(x.run)
	clear(x.bufs[:x.n])
	p.give(p.xslots)
	x.n = 0
}

// give returns slots to the free list and wakes a reader waiting for them.
func (p *fqPipe) give(slots []int32) {
	p.mu.Lock()
	p.free = append(p.free, slots...)
	p.mu.Unlock()
	p.freed.Signal()
}

// sealFQ seals and sends batches from the queue until it is empty.
func (r *Router) sealFQ(p *fqPipe) {
	p.sealMu.Lock()
	defer p.sealMu.Unlock()
	r.sealFQLocked(p)
}

// sealFQLocked is sealFQ with p.sealMu held. It is the inside hot path
// with route and allocates nothing.
func (r *Router) sealFQLocked(p *fqPipe) {
	for {
		now := r.clock.Now()
		ns := r.mono.ns(now)
		n := 0
		p.mu.Lock()
		for n < len(p.bslots) {
			s, mark, ok := p.q.Dequeue(ns)
			if !ok {
				break
			}
			buf := p.pool[s]
			if mark {
				fq.MarkCE(buf[bufHeadroom : bufHeadroom+p.sizes[s]])
			}
			p.bslots[n] = s
			p.batch.bufs[n] = buf
			p.batch.sizes[n] = p.sizes[s]
			p.batch.flows[n] = p.flows[s]
			n++
		}
		p.mu.Unlock()
		if n == 0 {
			return
		}
		p.lane.health.inside.Store(ns)
		p.run.now = ns
		r.route(p.batch, n, now)
		r.flushInside(p.run)
		p.lane.health.inside.Store(0)
		p.give(p.bslots[:n])
	}
}

// fqReason is the drop reason of a packet the fair queue dropped.
func fqReason(why fq.Reason) Reason {
	switch why {
	case fq.CoDel:
		return ReasonCoDel
	case fq.Expired:
		return ReasonFQExpired
	}
	return ReasonFQOverflow
}
