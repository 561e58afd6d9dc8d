package router

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/ratelimit"
	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// Options are a Router's dependencies. TUN, Bind and Identity are required.
type Options struct {
	// TUN and Bind are owned by the Router from New on: Run closes them
	// when it returns.
	TUN  tun.Device
	Bind udp.Bind
	// Identity is this gateway's static key, cipher and prologue.
	Identity *bhcrypto.Identity
	Logger   *slog.Logger // nil: discard
	Clock    Clock        // nil: SystemClock
	Rand     io.Reader    // receiver indices and jitter; nil: crypto/rand
	// QueueLen bounds the packets held per peer while a handshake runs
	// (default 128).
	QueueLen int
	// HandshakeQueueLen bounds handshake messages waiting for the
	// handshake loop (default 256); more are dropped as handshake_busy.
	HandshakeQueueLen int
	// Filter, if not nil, is the kernel early-drop filter attached to
	// Bind's socket; the Router keeps it current (see KernelFilter).
	Filter KernelFilter
	// RekeyAfter replaces RekeyAfterTime when positive and shorter, so
	// end-to-end tests can watch sessions rotate under live traffic
	// without waiting minutes. Production leaves it zero.
	RekeyAfter time.Duration
	// Lanes are devices for further lanes, each an inside and an outside
	// loop of its own (lanes.go); TUN and Bind are lane 0. Owned like them.
	Lanes []Lane
	// Express, if not nil, is the express socket of Bind's port
	// (udp.ListenExpress): an outside loop of its own reads it and
	// writes to ExpressTUN, and the gateway tells its peers that it
	// has one, so that they send sparse flows on it (package sparse). Owned
	// like Bind.
	Express udp.Bind
	// ExpressTUN is the express lane's TUN queue, which it only writes
	// (tun.DetachQueue); nil: lane 0's, shared with lane 0's outside
	// loop, whose writes of bulk batches it then waits for. Owned like
	// TUN.
	ExpressTUN tun.Device
	// ExpressSteered says that the kernel itself steers sparse flows
	// into ExpressTUN (package steer's program on the interface), which
	// is then attached for reading: the express lane also reads it and
	// seals and sends every packet at once, and the other lanes' readers
	// no longer sort flows (express.go). Needs Express and ExpressTUN.
	ExpressSteered bool
	// ExpressPriority, if positive, is the SCHED_FIFO priority (1-99) of
	// the express lane's loops: each runs on an OS thread of its own that
	// waits for packets in the kernel, so that a sparse packet is
	// handled the moment it arrives, ahead of the bulk lanes' threads
	// (express.go). Zero: ordinary threads and Go's poller.
	ExpressPriority int
	// ExpressKeepsP makes each of those loops keep its P while it waits
	// in the kernel, so that it runs the moment it wakes and the bulk
	// lanes never run on it (package threadwait). The caller adds a P to
	// GOMAXPROCS per loop: 2 with ExpressSteered, else 1. Needs
	// ExpressPriority.
	ExpressKeepsP bool
	// FIFOInside runs the inside path without the fair queue: the reader
	// seals bulk reads itself and hands single packets to the sealer in
	// read order (insidePipe), as before the fair queue. For comparisons
	// (benchmarks, tests); production leaves it false.
	FIFOInside bool
	// CoDelTarget and CoDelInterval tune the fair queue (fq.Config's
	// Target and Interval); zero keeps fq's defaults.
	CoDelTarget, CoDelInterval time.Duration
}

// Router forwards packets between the TUN device and the peers. It holds
// the wiring: the devices, identity, routing state, session index, drops
// and flow hasher, and the parts that own everything else (doc.go, "Parts",
// says which part owns what and who writes each shared field).
//
// Create it with New, give it routes with SetConfig, then call Run once.
// SetConfig, Peers, Drops, Handshakes, Healthy, FilterAttached and
// SetCanDeliver are safe to call at any time from any goroutine.
type Router struct {
	// Set by New, read-only afterwards.
	tun   tunDevice // reads: the inside loop; writes: tunDevice.write
	bind  udp.Bind  // Receive: the outside loop; Send: any loop
	log   *slog.Logger
	clock Clock
	mono  monoEpoch // for the stamps of liveness and loop health
	set   settings

	// Written by SetConfig alone (cfgMu), read lock-free by every loop.
	cfgMu sync.Mutex
	state atomic.Pointer[routingState]
	// keys is this gateway's static keys (keys.go): set by New and
	// SetKeyRing, its previous key retired by the handshake loop; read
	// by any loop.
	keys atomic.Pointer[bhcrypto.KeyRing]
	// index is written by the handshake loop and the outside loop
	// (sessions), and by SetConfig (removed peers); read lock-free.
	index indexTable
	drops Drops            // any goroutine adds
	flows *flowhash.Hasher // the lanes' seed (set by New) and fragment misses

	// The parts.
	hs     *handshaker    // handshake loop and its state (handshake.go)
	probe  *prober        // gateway health: probes and answers (probe.go)
	filter *kernelFilter  // kernel early-drop filter in step (filter.go)
	icmp   *icmpResponder // ICMP errors to local hosts (icmp.go)
	health loopHealth     // the loops' progress for Healthy (health.go)

	// lanes are the data path's lanes, lane 0 first (lanes.go); set by New.
	lanes []*lane
	// express is the express lane and its counts (package sparse).
	express expressPart
}

// settings are the Router's sizes and timings, fixed by New from Options
// and the TUN; read-only afterwards, so any goroutine reads them.
type settings struct {
	mtu int // the TUN's
	// bufSize is a data-path buffer's size, queueLen a peer queue's
	// length, rekeyAfter RekeyAfterTime or Options.RekeyAfter.
	bufSize, queueLen int
	rekeyAfter        time.Duration
	fifoInside        bool // Options.FIFOInside: insidePipe instead of the fair queue
	// codelTarget, codelInterval: Options.CoDelTarget, CoDelInterval.
	codelTarget, codelInterval time.Duration
	// noLaneBytes (tests only) makes the Router behave like a gateway
	// that predates lane bytes: its probes never say it reads them.
	noLaneBytes bool
}

// bufHeadroom is the space in front of each packet in the data-path
// buffers: room for the transport header, which also covers what TUN
// backends need for their own headers.
const bufHeadroom = bhcrypto.TransportHeaderSize

func init() {
	if bufHeadroom < tun.HeadroomNeeded {
		panic("router: transport header smaller than TUN headroom")
	}
}

// New returns a Router with no routes. It starts nothing.
func New(o Options) (*Router, error) {
	if o.TUN == nil || o.Bind == nil || o.Identity == nil {
		return nil, errors.New("router: TUN, Bind and Identity are required")
	}
	r := &Router{
		tun: tunDevice{Device: o.TUN}, bind: o.Bind,
		log: o.Logger, clock: o.Clock,
		set: settings{
			mtu:         o.TUN.MTU(),
			queueLen:    o.QueueLen,
			rekeyAfter:  rekeyInterval(o.RekeyAfter),
			fifoInside:  o.FIFOInside,
			codelTarget: o.CoDelTarget, codelInterval: o.CoDelInterval,
		},
	}
	r.keys.Store(bhcrypto.NewKeyRing(o.Identity))
	if r.log == nil {
		r.log = slog.New(slog.DiscardHandler)
	}
	if r.clock == nil {
		r.clock = SystemClock{}
	}
	r.mono = newMonoEpoch(r.clock.Now())
	rnd := o.Rand
	if rnd == nil {
		rnd = rand.Reader
	}
	if r.set.queueLen <= 0 {
		r.set.queueLen = 128
	}
	if r.set.mtu < 576 || r.set.mtu > 65535 {
		return nil, fmt.Errorf("router: TUN MTU %d out of range", r.set.mtu)
	}
	// A buffer holds the header, the largest inner packet the TUN can
	// hand us padded to a multiple of 16, and the tag.
	r.set.bufSize = bufHeadroom + r.set.mtu + bhcrypto.PaddingMultiple + bhcrypto.TagSize
	hq := o.HandshakeQueueLen
	if hq <= 0 {
		hq = 256
	}
	r.probe = newProber(r)
	var seed [8]byte
	if _, err := io.ReadFull(rnd, seed[:]); err != nil {
		return nil, fmt.Errorf("router: flow hash seed: %w", err)
	}
	r.flows = flowhash.New(binary.LittleEndian.Uint64(seed[:]))
	if err := r.initLanes(o.Lanes, o.Express, o.ExpressTUN); err != nil {
		return nil, err
	}
	if err := r.express.configure(o); err != nil {
		return nil, err
	}
	r.index.lanes = len(r.lanes)
	r.index.express = r.express.lane != nil
	r.icmp = newICMPResponder(&r.tun, &r.drops, r.set.mtu, ratelimit.New(ICMPRate, ICMPBurst, 4096, r.clock.Now))
	r.filter = newKernelFilter(o.Filter, r.log, &r.drops, r.index.has)
	r.index.onAdd, r.index.onRemove = r.filter.addIndex, r.filter.removeIndices
	blocker := newSourceBlocker(r.filter, &r.state, r.clock.Now, r.log)
	r.hs = newHandshaker(r, rnd, hq, newHandshakeGate(&r.keys, rnd, r.clock.Now, blocker))
	empty := &routingState{sites: map[string]*site{}, peers: map[bhcrypto.PublicKey]*Peer{}, probeTick: TimerTick}
	r.state.Store(empty)
	return r, nil
}

// SetConfig publishes new routes and peers. It is all or nothing: on error
// the running configuration is untouched. Peers whose site, name and key
// are unchanged keep their sessions; removed peers lose theirs and their
// queued packets. Calling it again with the same config changes nothing.
func (r *Router) SetConfig(c *Config) error {
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	old := r.state.Load()
	st, gone, updates, err := buildState(c, old, r.keys.Load().Current.Public, func(pc PeerConfig) *Peer {
		return newPeer(pc, r.set.queueLen, r.set.mtu, r.clock.Now, r.mono)
	})
	if err != nil {
		return err
	}
	// Accepted whole: from here on nothing fails.
	for _, u := range updates {
		u.apply(r.clock.Now)
	}
	r.filter.syncEndpoints(st, old)
	r.state.Store(st)
	r.filter.syncEndpoints(st, nil)
	for _, p := range gone {
		p.removed.Store(true)
		kps := p.keypairs.close()
		r.retire(kps[:]...)
		if n := p.queue.Clear(); n > 0 {
			r.drops.Add(Inside, ReasonNoRoute, uint64(n))
		}
	}
	if len(gone) > 0 { // one line per reload, however many went
		r.log.Info("peers removed", "count", len(gone), "gateways", names(gone))
	}
	return nil
}

// retire forgets sessions: their receiver indices stop matching.
func (r *Router) retire(kps ...*bhcrypto.Keypair) {
	any := false
	for _, kp := range kps {
		if kp != nil {
			any = true
		}
	}
	if !any {
		return
	}
	r.index.remove(kps...)
}

// Healthy reports whether every loop is making progress at now: a data
// loop waiting for input is healthy, one stuck in a batch for StuckAfter
// is not; the handshake loop must have run its timers within StuckAfter.
// The daemon feeds the systemd watchdog only while this returns nil.
func (r *Router) Healthy(now time.Time) error { return r.lanesHealthy(now) }

// Drops returns the drop counters.
func (r *Router) Drops() *Drops { return &r.drops }

// Peers returns a snapshot of every configured peer, in config order.
func (r *Router) Peers() []PeerStats {
	st := r.state.Load()
	out := make([]PeerStats, 0, len(st.order))
	for _, p := range st.order {
		out = append(out, p.Stats())
	}
	return out
}

// HandshakeStats are totals of handshakes since start.
type HandshakeStats struct {
	Initiated, Completed, Answered, TimedOut uint64
	// DH counts messages that reached Diffie-Hellman work.
	DH uint64
	// CookieReplies counts cookie replies sent under load.
	CookieReplies uint64
}

// Handshakes returns handshake totals.
func (r *Router) Handshakes() HandshakeStats {
	return HandshakeStats{
		Initiated: r.hs.count.initiated.Load(),
		Completed: r.hs.count.completed.Load(),
		Answered:  r.hs.count.answered.Load(),
		TimedOut:  r.hs.count.timedOut.Load(),
		DH:        r.hs.count.dh.Load(),

		CookieReplies: r.hs.count.cookieReplies.Load(),
	}
}

// Run forwards packets until ctx is cancelled or a device fails for good.
// It closes the TUN and the bind before it returns, and returns only after
// every goroutine it started has stopped. Call it once.
//
// Each loop runs on a goroutine of its own, and each hands its result
// over exactly once, into a channel with one slot per loop, so that none
// can block there: the slots are counted from the loops started, not
// kept in step with them by hand. The first loop that fails while Run is
// not stopping ends Run, and Run returns its error.
func (r *Router) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	loops := r.loops()
	errc := make(chan error, len(loops))
	var wg sync.WaitGroup
	for _, l := range loops {
		wg.Go(func() {
			err := l.run(ctx)
			if err != nil && ctx.Err() == nil {
				err = fmt.Errorf("%s loop: %w", l.name, err)
			} else {
				err = nil // stopping: a closed device is no failure
			}
			errc <- err
			cancel()
		})
	}
	<-ctx.Done()
	r.tun.Close()
	r.bind.Close()
	r.closeLanes()
	wg.Wait()
	close(errc)
	for err := range errc {
		if err != nil {
			return err
		}
	}
	return nil
}

// loop is one of the goroutines Run starts.
type loop struct {
	name string
	run  func(context.Context) error
}

// loops are the goroutines Run starts: lane 0's inside and outside
// loops, the handshake loop, and every other lane's (laneLoops).
func (r *Router) loops() []loop {
	return r.laneLoops([]loop{{"inside", r.insideLoop}, {"outside", r.outsideLoop}, {"handshake", r.hs.loop}})
}

// rekeyInterval is the initiator's rekey age for Options.RekeyAfter.
func rekeyInterval(opt time.Duration) time.Duration {
	if opt > 0 && opt < RekeyAfterTime {
		return opt
	}
	return RekeyAfterTime
}
