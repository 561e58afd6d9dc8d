package router

import (
	"net/netip"
	"sync"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// The express socket's input, policed.
//
// The kernel steers a transport message with lane byte udp.ExpressLane
// to the express socket, but it cannot authenticate: anyone may send
// datagrams with that byte. Datagrams without a lane byte (handshakes,
// relay messages, transport messages of a session whose peer has not yet
// said it reads lane bytes) go to the lane sockets by packet hash
// (udp.ListenExpress), not here; a bind without that steering may still
// deliver them here, and they are handled as below. With
// ExpressPriority the express outside loop runs at real-time priority,
// so whatever it opens preempts the bulk lanes. It therefore handles
// itself only transport messages carrying the express lane byte, and of
// those at most ExpressRate a second (ExpressBurst at once): an honest
// express lane carries sparse flows only, each held to its token bucket
// by the sender (package sparse). Everything else it copies, in the batch's
// order, to a spill loop on an ordinary goroutine, which handles it as
// any lane's outside loop would; a forged express datagram that fails
// its tag costs the real-time thread one token, no more. When the spill
// loop is behind (expressSpillBatches batches waiting) the rest is
// dropped and counted (express_overflow): input beyond the express
// lane's budget must not take real-time time, nor unbounded memory.
//
// Relay messages (a hub's forwards, a spoke's relayed datagrams) carry no
// lane byte, so the steering keeps them off the express socket; should
// one arrive here anyway, a bind that can (transit.Bind: relayDeferrer)
// hands it back unread, and the spill loop has it processed
// (relayProcessor) before it handles what it carries, so no relay work
// runs on the real-time thread either.
const (
	// ExpressRate is how many express datagrams a second the express
	// outside loop opens itself; ExpressBurst how many at once.
	ExpressRate  = 16384
	ExpressBurst = 256
	// expressSpillBatches is how many batches may wait for the spill
	// loop.
	expressSpillBatches = 4
)

// expressGuard is the express outside loop's policing and its spill
// loop. bucket is owned by the express outside loop; the batches pass
// between the two loops over the channels; the counters are read by any
// goroutine.
type expressGuard struct {
	tokens float64
	last   int64 // mono ns of the last refill; 0: never

	free  chan *outsideBatch
	queue chan spillWork
	done  sync.WaitGroup

	// count is the router's express counts: spilled counts datagrams
	// given to the spill loop, policed those of them that carried the
	// express lane byte (over budget).
	count *expressCounts
}

type spillWork struct {
	b   *outsideBatch
	n   int
	now time.Time
}

// newExpressGuard returns a guard with its spill batches, for lane l.
func (r *Router) newExpressGuard(l *lane) *expressGuard {
	g := &expressGuard{
		tokens: ExpressBurst,
		count:  &r.express.count,
		free:   make(chan *outsideBatch, expressSpillBatches),
		queue:  make(chan spillWork, expressSpillBatches),
	}
	for range expressSpillBatches {
		b := r.newOutsideBatch()
		b.lane = l
		g.free <- b
	}
	return g
}

// take reports whether the express loop may open one more express
// datagram at ns.
func (g *expressGuard) take(ns int64) bool {
	if g.last != 0 && ns > g.last {
		g.tokens = min(ExpressBurst, g.tokens+float64(ns-g.last)*ExpressRate/1e9)
	}
	g.last = ns
	if g.tokens < 1 {
		return false
	}
	g.tokens--
	return true
}

// sort keeps in b the datagrams the express loop handles itself, in
// order, and returns how many; the others go to the spill loop (or are
// dropped, counted, when it is behind). It allocates nothing.
func (r *Router) expressSort(g *expressGuard, b *outsideBatch, n int, now time.Time) int {
	ns := r.mono.ns(now)
	var sb *outsideBatch
	full := false
	spill, kept := 0, 0
	for i := range n {
		msg := b.bufs[i][:b.sizes[i]]
		express := len(msg) >= bhcrypto.TransportOverhead && msg[0] == bhcrypto.MsgTransport && msg[1] == udp.ExpressLane
		if express && g.take(ns) {
			b.bufs[kept], b.bufs[i] = b.bufs[i], b.bufs[kept]
			b.sizes[kept], b.eps[kept] = b.sizes[i], b.eps[i]
			kept++
			continue
		}
		if sb == nil && !full {
			select {
			case sb = <-g.free:
			default:
				full = true
			}
		}
		if sb == nil {
			r.drops.Add(Outside, ReasonExpressOverflow, 1)
			continue
		}
		if express {
			g.count.policed.Add(1)
		}
		buf := sb.bufs[spill][:cap(sb.bufs[spill])]
		sb.sizes[spill] = copy(buf, msg)
		sb.eps[spill] = b.eps[i]
		spill++
	}
	if sb != nil {
		g.count.spilled.Add(uint64(spill))
		g.queue <- spillWork{sb, spill, now} // never blocks: queue holds every batch of free
	}
	return kept
}

// relayDeferrer is a bind that can leave relay messages unread in
// Receive (transit.Bind.DeferRelay); relayProcessor one that reads them
// afterwards (transit.Bind.Process).
type relayDeferrer interface{ DeferRelay() }

type relayProcessor interface {
	Process(bufs [][]byte, sizes []int, eps []netip.AddrPort, n int) int
}

// spillLoop handles what the express loop left to it, on an ordinary
// goroutine, until the queue closes.
func (r *Router) spillLoop(g *expressGuard, proc relayProcessor) {
	defer g.done.Done()
	for w := range g.queue {
		n := w.n
		if proc != nil {
			n = proc.Process(w.b.bufs, w.b.sizes, w.b.eps, n)
		}
		r.receiveBatch(w.b, n, w.now)
		g.free <- w.b
	}
}

// expressGuardFor starts lane l's guard and its spill loop; stop ends
// the loop once it has handled what was queued.
func (r *Router) expressGuardFor(l *lane) *expressGuard {
	g := r.newExpressGuard(l)
	var proc relayProcessor
	if d, ok := l.bind.(relayDeferrer); ok {
		if p, ok := l.bind.(relayProcessor); ok {
			d.DeferRelay()
			proc = p
		}
	}
	g.done.Add(1)
	go r.spillLoop(g, proc)
	return g
}

func (g *expressGuard) stop() {
	close(g.queue)
	g.done.Wait()
}
