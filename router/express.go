package router

import (
	"context"
	"errors"
	"fmt"
	"github.com/bridgehead/bridgehead/steer"
	"github.com/bridgehead/bridgehead/udp"
	"sync/atomic"
	"time"

	"github.com/bridgehead/bridgehead/tun"
)

// The express lane's loops.
//
// Sorting flows (package sparse) keeps a sparse packet out of the bulk queues,
// but on a gateway whose cores are busy with a bulk flow, the loop that
// handles it must also get a core at once. Two things delay it:
//
//   - Go's poller: a goroutine waiting for a socket or a TUN queue is
//     made runnable by whichever thread next polls, and then waits for a
//     thread and a P of its own; under load that is the scheduler's
//     next look, up to milliseconds away.
//   - The kernel's scheduler: the woken thread waits for a core behind
//     the bulk lanes' threads, whose TUN writes carry the pods' TCP work.
//
// With ExpressPriority the express lane's loops each lock an OS thread
// of their own, give it SCHED_FIFO at that priority, and wait for packets
// in the kernel (WaitReadable, package threadwait): the kernel wakes that
// thread, which preempts the bulk threads (at their next preemption
// point), and reads without blocking. With ExpressKeepsP each also keeps
// its P while it waits, so it needs none when it wakes, and the bulk
// lanes keep to the Ps they would have without the express lane. The
// loop keeps its thread to itself (runtime.LockOSThread without unlock)
// and gives it its ordinary policy back when it ends, and threads the
// runtime creates from it start as ordinary ones (SCHED_RESET_ON_FORK),
// so the priority never reaches other goroutines (TestExpressLoops
// counts the real-time threads). The express lane only ever carries
// sparse flows, each within its token bucket and all within the steering
// program's aggregate bucket, so a real-time thread cannot starve the
// others.
//
// With ExpressSteered the sender's side has such a loop too: the kernel's
// steering program (package steer) puts sparse flows on the express TUN
// queue, which expressInside reads and seals at once. Without it the
// bulk lanes' readers sort flows themselves (enqueueRead), and a sparse
// packet first waits for its lane's reader.

// expressWaitTimeout bounds one wait in the kernel: how long a closed
// device may hold its loop (and Close) before the loop notices.
const expressWaitTimeout = 100 * time.Millisecond

// expressPart is the Router's express lane: lane is nil without one
// (Options.Express), set by New like steered and priority; its outside
// loop reads lane's socket, and with steered its inside loop reads lane's
// TUN queue. count counts its datagrams (expressCounts names the
// writers); realtime is how many of its loops run on a SCHED_FIFO thread
// now, written by each loop as it starts and ends (expressThread). keepP
// is Options.ExpressKeepsP.
type expressPart struct {
	lane     *lane
	steered  bool
	priority int
	keepP    bool
	count    expressCounts
	realtime atomic.Int32
}

// expressCounts counts the express lane's datagrams for the metrics:
// sent, sealed with lane byte udp.ExpressLane by any inside reader;
// received, read from this gateway's express socket by its outside loop
// (with what the kernel hashes there: handshakes, keepalives); spilled,
// those of them the outside loop left to its spill loop, and policed,
// the express transport messages among those, over the express budget
// (outside_express.go; written by the express outside loop, across its
// guards). Sparse flows send little, so these shared atomics stay off
// the bulk path.
type expressCounts struct {
	sent, received   atomic.Uint64
	spilled, policed atomic.Uint64
}

// configure checks and takes the express options; New calls it after
// initLanes.
func (e *expressPart) configure(o Options) error {
	if o.ExpressPriority < 0 || o.ExpressPriority > 99 {
		return fmt.Errorf("router: express priority %d: want 0 (none) or a SCHED_FIFO priority 1-99", o.ExpressPriority)
	}
	if o.ExpressSteered && (o.Express == nil || o.ExpressTUN == nil) {
		return errors.New("router: ExpressSteered needs Express and ExpressTUN")
	}
	if o.ExpressKeepsP && o.ExpressPriority == 0 {
		return errors.New("router: ExpressKeepsP needs ExpressPriority")
	}
	e.steered, e.priority, e.keepP = o.ExpressSteered, o.ExpressPriority, o.ExpressKeepsP
	return nil
}

// expressThread prepares the calling goroutine to run an express loop
// named name: with a priority, it locks the goroutine to its OS thread
// for good and makes the thread SCHED_FIFO, and returns a wait to call
// before each read of dev (nil: read as usual, when there is no priority
// or dev cannot wait in the kernel) and a release for the loop to defer,
// which gives the thread its ordinary policy back. A thread that may not
// be made real-time (no CAP_SYS_NICE) still waits in the kernel; the
// failure is logged once per loop.
func (r *Router) expressThread(name string, dev any) (wait func() error, release func()) {
	release = func() {}
	if r.express.priority == 0 {
		return nil, release
	}
	w, ok := dev.(udp.ReadWaiter)
	if !ok {
		return nil, release
	}
	release, err := realtimeThread(r.express.priority)
	if err != nil {
		r.log.Warn("express lane runs without real-time priority", "loop", name, "priority", r.express.priority, "err", err)
	} else {
		r.express.realtime.Add(1)
		undo := release
		release = func() {
			r.express.realtime.Add(-1)
			undo()
		}
	}
	keep := keepGate{on: r.express.keepP}
	return func() error {
		for {
			ready, err := w.WaitReadable(expressWaitTimeout, r.keepP(&keep))
			if err != nil || ready {
				return err
			}
		}
	}, release
}

// expressKeepFor is how long an express loop keeps its P while it waits
// (keepGate) after it last saw a bulk lane at work.
const expressKeepFor = time.Second

// keepGate decides, before each wait of one express loop, whether the
// loop keeps its P while it waits (Options.ExpressKeepsP). That matters
// only while the bulk lanes keep the other Ps busy: on a quiet gateway a
// P is free when the loop wakes. And it has a cost: the runtime preempts
// a waiter that keeps its P every 10 ms (package threadwait), which took
// 6 % of a core for the two loops of an idle lab gateway (bench/README.md,
// "Express loops that keep their P"). So the loop keeps it from when it
// sees a bulk lane in the middle of a batch (Router.bulkBusy; a loop that
// keeps its P looks every 10 ms or sooner, one that does not at least
// every expressWaitTimeout) until it has not seen one for
// expressKeepFor. The zero value never keeps it. Each loop owns its own.
type keepGate struct {
	on   bool  // Options.ExpressKeepsP
	seen int64 // when a bulk lane was last seen busy, mono ns; 0: never
}

// keep reports whether the wait that starts at ns keeps the P, busy
// saying whether a bulk lane is in the middle of a batch now.
func (g *keepGate) keep(busy bool, ns int64) bool {
	if !g.on {
		return false
	}
	if busy {
		g.seen = ns
	}
	return g.seen != 0 && ns-g.seen < int64(expressKeepFor)
}

// keepP is g's decision for a wait that starts now; without
// ExpressKeepsP it reads neither the clock nor the lanes.
func (r *Router) keepP(g *keepGate) bool {
	return g.on && g.keep(r.bulkBusy(), r.mono.ns(r.clock.Now()))
}

// bulkBusy reports whether a bulk lane's loop is in the middle of a
// batch now (its loopHealth stamp is set); any goroutine may call it.
// Under a load that keeps the Ps busy they mostly are.
func (r *Router) bulkBusy() bool {
	for _, l := range r.lanes {
		if l.health.inside.Load() != 0 || l.health.outside.Load() != 0 {
			return true
		}
	}
	return false
}

// expressInside is the express lane's inside loop (with ExpressSteered):
// it reads the express TUN queue, where the kernel puts sparse flows
// only, and seals and sends every packet at once on the express socket,
// with the express lane byte toward peers that have one. It owns its
// batch; it returns when the TUN is closed or fails for good.
func (r *Router) expressInside(ctx context.Context, l *lane) error {
	wait, release := r.expressThread("inside express", l.tun.Device)
	defer release()
	bs := max(l.tun.BatchSize(), 1)
	b := &insideBatch{bufs: make([][]byte, bs), sizes: make([]int, bs), express: true, frags: r.flows.NewTable()}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, r.set.bufSize)
	}
	b.run = newSealRun(l.bind, bs)
	failures := 0
	for {
		var n int
		err := waitThen(wait)
		if err == nil {
			n, err = l.tun.Read(b.bufs, b.sizes, bufHeadroom)
		}
		if err != nil {
			if errors.Is(err, tun.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			r.drops.Add(Inside, ReasonTUNReadError, 1)
			if failures++; failures >= maxConsecutiveErrors {
				return fmt.Errorf("express TUN read failed %d times in a row: %w", failures, err)
			}
			if n == 0 {
				continue
			}
		} else {
			failures = 0
		}
		now := r.clock.Now()
		ns := r.mono.ns(now)
		l.health.inside.Store(ns)
		b.run.now = ns
		r.route(b, n, now)
		r.flushInside(b.run)
		l.health.inside.Store(0)
	}
}

// laneFlow is the flow hash laneByte derives a packet's lane byte from:
// with steering the kernel's (steer.LaneHash, in the high half so that
// the lane byte is steer.Lane of it), so that a connection takes the
// same lane at both gateways both ways, as it does with the TUN's own
// flow table without steering (steer.LaneHash says how); else flow.
func (r *Router) laneFlow(pkt []byte, flow uint64) uint64 {
	if !r.express.steered {
		return flow
	}
	if h, ok := steer.LaneHash(pkt); ok {
		return uint64(h) << 32
	}
	return flow
}

// waitThen calls wait, if any.
func waitThen(wait func() error) error {
	if wait == nil {
		return nil
	}
	return wait()
}

// expressOutsideWait is outsideLane's wait before each receive and its
// release: the express lane's (expressThread); none for the other lanes.
func (r *Router) expressOutsideWait(l *lane) (wait func() error, release func()) {
	if l != r.express.lane {
		return nil, func() {}
	}
	return r.expressThread("outside express", l.bind)
}
