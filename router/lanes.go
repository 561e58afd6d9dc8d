package router

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// MaxLanes is the most lanes a Router runs (Options.Lanes plus the first).
const MaxLanes = 64

// Lane is one more set of data-path devices for Options.Lanes: a queue of
// the same multi-queue TUN interface as Options.TUN (tun.OpenOffloadQueues)
// and a socket on the same port as Options.Bind (udp.ListenLanes). The
// Router owns them from New on and closes them when Run returns.
type Lane struct {
	TUN  tun.Device
	Bind udp.Bind
}

// lane is one inside reader+sealer (reading tun, sending on bind) and one
// outside reader+opener (receiving on bind, writing to tun).
// Lane 0 is Options.TUN and Options.Bind. The kernel picks the lane of a
// packet: the TUN queue by the flow hash of the packet the stack routes
// into the interface, the socket by the lane byte the sending gateway
// derived from the inner flow (see Lane bytes below) or, without one, by
// a hash of the datagram's addresses and ports; so one flow stays on one
// lane and in order, and one gateway pair's flows spread over the lanes.
//
// Everything else is shared by every lane and safe for concurrent use:
// the routing state (an immutable snapshot behind an atomic pointer), the
// index (atomic slots), peers (atomic counters and stamps), keypairs (an
// atomic send counter; the replay window under its own mutex), the drop
// counters (atomic), the handshake loop's channel, the ICMP responder
// (its own lock) and the flow hasher (read-only seed, atomic miss count;
// each lane's inside path has a fragment table of its own, package flowhash).
// The ICMP responder
// and the handshake and probe messages use lane 0's devices.
//
// health has one writer per stamp: this lane's loops. index is the
// lane's place in Router.lanes (the express lane's is -1), set by
// initLanes. strays is written by the lane's outside loop only; foreign
// is written by initLanes (setForeign) and read-only after.
type lane struct {
	tun    *tunDevice
	bind   udp.Bind
	health *loopHealth
	index  int
	// strays counts transport messages this lane's socket received with
	// another lane's lane byte: the receiver's GRO joined the end of one
	// lane's run to the start of another's (udp.ListenLanes), and the
	// kernel steered the whole run by its first datagram. The lane opens
	// them; their flows may be reordered by up to a batch.
	strays atomic.Uint64
	// foreign has bit lb set when lane byte lb belongs to another lane:
	// receiveBatch tests it per transport datagram, so the lane count's
	// modulo is taken once per lane byte at set-up, not per datagram.
	foreign [4]uint64
}

// setForeign fills l.foreign for a Router of n lanes: lane byte lb is
// another lane's when lb mod n is not l's index. 0 and udp.ExpressLane
// belong to none (the kernel hashes the first, and the second is a small
// datagram that may end a run), nor does any byte on the express lane's
// socket (index -1).
func (l *lane) setForeign(n int) {
	l.foreign = [4]uint64{}
	if l.index < 0 {
		return
	}
	for lb := 1; lb < 256; lb++ {
		if lb != udp.ExpressLane && lb%n != l.index {
			l.foreign[lb>>6] |= 1 << (lb & 63)
		}
	}
}

// stray reports whether lane byte lb belongs to another lane than l.
func (l *lane) stray(lb byte) bool {
	return l.foreign[lb>>6]&(1<<(lb&63)) != 0
}

// initLanes sets up lane 0 from the Router's own devices, one lane per
// extra and the express lane on express (nil: none); New calls it after
// r.tun, r.bind and r.set.mtu are set.
func (r *Router) initLanes(extra []Lane, express udp.Bind, expressTUN tun.Device) error {
	if len(extra)+1 > MaxLanes {
		return fmt.Errorf("router: %d lanes, at most %d", len(extra)+1, MaxLanes)
	}
	r.lanes = make([]*lane, 0, len(extra)+1)
	r.lanes = append(r.lanes, &lane{tun: &r.tun, bind: r.bind, health: &r.health})
	for i, e := range extra {
		if e.TUN == nil || e.Bind == nil {
			return fmt.Errorf("router: lane %d: TUN and Bind are required", i+1)
		}
		if e.TUN.MTU() != r.set.mtu {
			return fmt.Errorf("router: lane %d: TUN MTU %d, lane 0 has %d", i+1, e.TUN.MTU(), r.set.mtu)
		}
		if e.TUN.BatchSize() != r.tun.BatchSize() || e.Bind.BatchSize() != r.bind.BatchSize() {
			return fmt.Errorf("router: lane %d: batch sizes TUN %d, bind %d; lane 0 has %d, %d",
				i+1, e.TUN.BatchSize(), e.Bind.BatchSize(), r.tun.BatchSize(), r.bind.BatchSize())
		}
		r.lanes = append(r.lanes, &lane{tun: &tunDevice{Device: e.TUN}, bind: e.Bind, health: new(loopHealth), index: i + 1})
	}
	for _, l := range r.lanes {
		l.setForeign(len(r.lanes))
	}
	if express != nil {
		if express.BatchSize() != r.bind.BatchSize() {
			return fmt.Errorf("router: express socket: batch size %d, lane 0 has %d", express.BatchSize(), r.bind.BatchSize())
		}
		// Only an outside loop runs on it: it writes to its own TUN
		// queue, else to lane 0's.
		r.express.lane = &lane{tun: &r.tun, bind: express, health: new(loopHealth), index: -1}
		if expressTUN != nil {
			if expressTUN.MTU() != r.set.mtu {
				return fmt.Errorf("router: express TUN MTU %d, lane 0 has %d", expressTUN.MTU(), r.set.mtu)
			}
			r.express.lane.tun = &tunDevice{Device: expressTUN}
		}
	}
	return nil
}

// laneStrays sums the lanes' strays.
func (r *Router) laneStrays() uint64 {
	var n uint64
	for _, l := range r.lanes {
		n += l.strays.Load()
	}
	return n
}

// Lanes is the number of lanes the Router runs.
func (r *Router) Lanes() int { return len(r.lanes) }

// laneLoops appends to ls the inside and outside loops of every lane but
// lane 0 (Run's own list has lane 0's) and the express lane's loops.
func (r *Router) laneLoops(ls []loop) []loop {
	for i, l := range r.lanes[1:] {
		ls = append(ls,
			loop{fmt.Sprintf("inside %d", i+1), func(ctx context.Context) error { return r.insideLane(ctx, l) }},
			loop{fmt.Sprintf("outside %d", i+1), func(ctx context.Context) error { return r.outsideLane(ctx, l) }})
	}
	if r.express.lane != nil {
		ls = append(ls, loop{"outside express", func(ctx context.Context) error { return r.outsideLane(ctx, r.express.lane) }})
		if r.express.steered {
			ls = append(ls, loop{"inside express", func(ctx context.Context) error { return r.expressInside(ctx, r.express.lane) }})
		}
	}
	return ls
}

// closeLanes closes every lane's devices but lane 0's.
func (r *Router) closeLanes() {
	for _, l := range r.lanes[1:] {
		l.tun.Close()
		l.bind.Close()
	}
	if r.express.lane != nil {
		r.express.lane.bind.Close()
		if r.express.lane.tun != &r.tun {
			r.express.lane.tun.Close()
		}
	}
}

// lanesHealthy is Healthy for every lane: lane 0 and the handshake loop
// first, then the others, named by number.
func (r *Router) lanesHealthy(now time.Time) error {
	ns := r.mono.ns(now)
	if err := r.health.check(ns); err != nil {
		return err
	}
	for i, l := range r.lanes[1:] {
		if err := l.health.check(ns); err != nil {
			return fmt.Errorf("lane %d: %w", i+1, err)
		}
	}
	if r.express.lane != nil {
		if err := r.express.lane.health.check(ns); err != nil {
			return fmt.Errorf("express lane: %w", err)
		}
	}
	return nil
}

// Lane bytes. Every datagram of a gateway pair leaves from one port to
// one port, so the receiver's SO_REUSEPORT hash would hand all of them
// to one socket, and one core would open them however many lanes it
// runs. Instead the sender writes a byte derived from the inner packet's
// flow hash into each transport header (crypto.Keypair.SealLane), and the
// receiver's kernel steers each datagram to socket (byte mod lanes)
// (udp.ListenLanes' reuseport program), so one pair's flows spread over
// the receiver's lanes while each flow stays on one socket, in order.
// Nothing else changes: one source port per pair, so NAT mappings,
// keepalives, endpoint learning and the kernel filter's endpoint map are
// as before; handshakes and messages without a lane byte are steered by
// the kernel's hash, as before.
//
// Receivers that predate the lane byte drop messages carrying one, so a
// sender sets it only on a session on which the peer said it reads them
// (flagLanes in its probes and replies; the prober probes once on each
// new session to learn it within a round trip). Until then, and toward
// older gateways, the byte is 0 and the receiver's hash spreads by peer.
// When a session starts carrying lane bytes a flow may move from its
// hashed socket to its steered one, once per session: a few packets can
// be reordered then, within the replay window.

// laneTag names a session for Peer.laneSession: its local index, with a
// bit set so that no session's tag is 0.
func laneTag(kp *bhcrypto.Keypair) uint64 { return 1<<32 | uint64(kp.LocalIndex) }

// laneByte is the lane byte of a packet of the given flow sealed for p on
// kp: udp.ExpressLane for an express packet once p said it has an
// express lane on kp (flagExpress), else 1-254 from the flow hash once p
// said it reads lane bytes on kp, else 0.
func laneByte(p *Peer, kp *bhcrypto.Keypair, flow uint64, express bool) byte {
	tag := laneTag(kp)
	if express && p.expressSession.Load() == tag {
		return udp.ExpressLane
	}
	if p.laneSession.Load() != tag {
		return 0
	}
	return byte(1 + (flow>>32)%254)
}

// Replay windows. A session's messages reach several lanes at once, and
// while one lane is descheduled its socket's queue ages: with one window
// per session, the other lanes move it past that queue's counters, and
// they are dropped as too old when the lane wakes. Within one
// socket counters arrive in order, so each receiving lane's share of a
// session gets its own window, picked by the message's lane byte (which
// is authenticated, so a replay always meets the window that saw the
// original, whatever socket it arrives on) the way the kernel picks the
// socket. Messages without a lane byte use the keypair's own window.
// A window is about 2 KiB: at most maxLaneWindows per session, shared
// round robin by the lanes beyond.

// maxLaneWindows bounds the replay windows of one session.
const maxLaneWindows = 16

// laneWindow is one lane's replay window of a session, under its own lock.
type laneWindow struct {
	mu sync.Mutex
	w  bhcrypto.ReplayWindow
}

// laneWindows returns the replay windows of a new session of a Router
// with lanes lanes: none for one lane.
func laneWindows(lanes int) []laneWindow {
	if lanes < 2 {
		return nil
	}
	return make([]laneWindow, min(lanes, maxLaneWindows))
}

// checkReplay records counter, received with lane byte lane, in the
// session's replay window for that lane and reports whether it is new.
func (e *indexEntry) checkReplay(counter uint64, lane byte) bool {
	if lane == udp.ExpressLane && e.express != nil {
		e.express.mu.Lock()
		ok := e.express.w.Check(counter)
		e.express.mu.Unlock()
		return ok
	}
	if lane == 0 || len(e.windows) == 0 {
		return e.kp.CheckReplay(counter)
	}
	w := &e.windows[int(lane)%e.lanes%len(e.windows)]
	w.mu.Lock()
	ok := w.w.Check(counter)
	w.mu.Unlock()
	return ok
}

// sortByLane orders the run's datagrams by lane byte, stably, before they
// are sent. The bind segments runs of equal-sized datagrams into one
// message (GSO) but never across lane bytes, because where nothing
// segments the message on the way (loopback, veth) the receiver's kernel
// steers it whole by its first datagram; the fair queue interleaves
// flows, so unsorted runs would be cut to single datagrams. A flow has
// one lane byte, so its packets keep their order; counters stay
// increasing within each lane byte, and so within each of the receiver's
// replay windows. A counting sort into scratch slices allocated once.
func (b *sealRun) sortByLane() {
	n := len(b.out)
	if n < 2 {
		return
	}
	var start [257]int
	mixed := false
	for _, m := range b.out {
		start[int(m[1])+1]++
		mixed = mixed || m[1] != b.out[0][1]
	}
	if !mixed {
		return
	}
	for i := 1; i < len(start); i++ {
		start[i] += start[i-1]
	}
	if cap(b.sortOut) < n {
		b.sortOut, b.sortFlows = make([][]byte, cap(b.out)), make([]uint64, cap(b.out))
	}
	out, flows := b.sortOut[:n], b.sortFlows[:n]
	for i, m := range b.out {
		k := start[m[1]]
		start[m[1]]++
		out[k], flows[k] = m, b.flows[i]
	}
	copy(b.out, out)
	copy(b.flows, flows)
	clear(out)
}
