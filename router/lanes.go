package router

import (
	"context"
	"fmt"
	"time"

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
// into the interface, the socket by a hash of the datagram's addresses
// and ports, so one flow stays on one lane and in order.
//
// Everything else is shared by every lane and safe for concurrent use:
// the routing state (an immutable snapshot behind an atomic pointer), the
// index (atomic slots), peers (atomic counters and stamps), keypairs (an
// atomic send counter; the replay window under its own mutex), the drop
// counters (atomic), the handshake loop's channel, the ICMP responder
// (its own lock) and the flow hasher (read-only seed). The ICMP responder
// and the handshake and probe messages use lane 0's devices.
//
// health has one writer per stamp: this lane's loops.
type lane struct {
	tun    *tunDevice
	bind   udp.Bind
	health *loopHealth
}

// initLanes sets up lane 0 from the Router's own devices and one lane per
// extra; New calls it after r.tun, r.bind and r.set.mtu are set.
func (r *Router) initLanes(extra []Lane) error {
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
		r.lanes = append(r.lanes, &lane{tun: &tunDevice{Device: e.TUN}, bind: e.Bind, health: new(loopHealth)})
	}
	return nil
}

// Lanes is the number of lanes the Router runs.
func (r *Router) Lanes() int { return len(r.lanes) }

// startLanes starts the inside and outside loops of every lane but lane 0
// (Run starts lane 0's itself).
func (r *Router) startLanes(start func(string, func(context.Context) error)) {
	for i, l := range r.lanes[1:] {
		start(fmt.Sprintf("inside %d", i+1), func(ctx context.Context) error { return r.insideLane(ctx, l) })
		start(fmt.Sprintf("outside %d", i+1), func(ctx context.Context) error { return r.outsideLane(ctx, l) })
	}
}

// closeLanes closes every lane's devices but lane 0's.
func (r *Router) closeLanes() {
	for _, l := range r.lanes[1:] {
		l.tun.Close()
		l.bind.Close()
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
	return nil
}
