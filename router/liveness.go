package router

import (
	"fmt"
	"sync/atomic"
	"time"

	"github.com/bridgehead/bridgehead/router/probestate"
)

// Health probing constants.
const (
	// DefaultProbeInterval is how long a remote gateway may stay silent
	// before we probe it, unless its site sets its own interval.
	DefaultProbeInterval = 200 * time.Millisecond
	// MinProbeInterval and MaxProbeInterval bound a site's probe
	// interval: below the first the probe tick cannot keep up, above
	// the second a dead gateway keeps its flows for minutes.
	MinProbeInterval = 50 * time.Millisecond
	MaxProbeInterval = 30 * time.Second
	// ProbeMisses is how many probe intervals of silence mark a gateway
	// down.
	ProbeMisses = 3
	// IdleProbeFactor stretches the probe interval of a gateway that
	// carries none of our traffic: it has no flows to fail over, so it
	// is probed ten times less often (every 2 s at the default) and an
	// idle mesh of hundreds of gateways costs little. Traffic to it
	// brings the interval back at once.
	IdleProbeFactor = 10
	// ActiveWindow is how long after the last data packet to a gateway
	// it is probed at the full rate.
	ActiveWindow = 10 * time.Second
	// ProbeTick is the shortest interval at which the handshake loop
	// looks at probe timers; it uses a quarter of the shortest probe
	// interval of its peers, at least this and at most TimerTick, so a
	// down gateway is noticed at most a quarter interval late.
	ProbeTick = 20 * time.Millisecond
	// RecoverProbes and FlapDecay are the flap damping's (package
	// probestate): a gateway that went down is up again after
	// RecoverProbes answered probes in a row, more after repeated downs,
	// and the count of recent downs halves every FlapDecay.
	RecoverProbes = probestate.RecoverProbes
	FlapDecay     = probestate.FlapDecay
)

// Liveness states of a remote gateway.
type LiveState uint32

const (
	// LiveConnecting: no evidence yet that our packets reach this gateway.
	LiveConnecting LiveState = iota
	// LiveUp: the gateway proved within ProbeMisses probe intervals
	// that our packets reach it (see liveness). Only gateways that are
	// up carry flows while any is.
	LiveUp
	// LiveDown: it proved that once, then did not for ProbeMisses probe
	// intervals although probed; it is up again once it answered
	// RecoverProbes probes in a row, more after repeated downs
	// (package probestate).
	LiveDown
)

// DownReason says why a gateway is down.
type DownReason uint32

const (
	// DownNone: it is not down.
	DownNone DownReason = iota
	// DownNoAnswer: our probes went unanswered for ProbeMisses probe
	// intervals (it died, or the path to it or back is cut).
	DownNoAnswer
	// DownCannotDeliver: it answers, but reports that it cannot deliver
	// to its own site (flagCannotDeliver: LAN link down, no route to a
	// node CIDR).
	DownCannotDeliver
	// DownDraining: it answers, but says it is shutting down
	// (flagDraining: a rolling upgrade, a SIGTERM). It still forwards
	// what reaches it; a planned stop does not count as a flap
	// (probestate.Damper).
	DownDraining
)

func (d DownReason) String() string {
	switch d {
	case DownNoAnswer:
		return "no answer"
	case DownCannotDeliver:
		return "cannot deliver"
	case DownDraining:
		return "draining"
	}
	return ""
}

// MarshalText and UnmarshalText carry the reason by name in JSON.
func (d DownReason) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

func (d *DownReason) UnmarshalText(b []byte) error {
	for _, r := range []DownReason{DownNone, DownNoAnswer, DownCannotDeliver, DownDraining} {
		if r.String() == string(b) {
			*d = r
			return nil
		}
	}
	return fmt.Errorf("unknown down reason %q", b)
}

// MarshalText and UnmarshalText carry the state by name in JSON.
func (s LiveState) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

func (s *LiveState) UnmarshalText(b []byte) error {
	switch string(b) {
	case "up":
		*s = LiveUp
	case "down":
		*s = LiveDown
	case "connecting":
		*s = LiveConnecting
	default:
		return fmt.Errorf("unknown liveness state %q", b)
	}
	return nil
}

func (s LiveState) String() string {
	switch s {
	case LiveUp:
		return "up"
	case LiveDown:
		return "down"
	}
	return "connecting"
}

// liveness is one remote gateway's health as the data path sees it. It is
// the single answer to "is this gateway up" that the flow selector, the
// bridgehead_gateway_up metric, `status` and /readyz all read.
//
// Health comes from the data path itself, and only from evidence that
// OUR packets reach the gateway (acked): an answer to one of our probes,
// the response to our handshake initiation, or the first packet on a
// session we answered (the initiator got our response). Anything else
// the gateway sends us (its data, keepalives, its own probes, its
// initiations) proves only the path from it to us: with datagrams from us
// to it dropped and the other way working, it would keep a black hole up
// forever. A gateway unproven for one probe interval is probed with an
// authenticated probe that it answers at once, so a gateway whose process
// is up but whose path (either way) is black-holed goes down the same
// way as one that died. Receiving data is not counted even when it came
// after our last send: on a one-way path the gateway's own traffic keeps
// arriving while ours is lost.
//
// Times are monotonic nanoseconds of the router's monoEpoch, never
// wall-clock values, so a clock step cannot mark gateways down.
//
// Writers: rtt, probeReplies and acked by the outside loop (acked also
// by the handshake loop, for a handshake response), and only for a reply
// to a probe in flight (probestate.InFlight names its writers); interval by
// SetConfig; everything else by the handshake loop alone (evaluate and
// prober.run). Any goroutine may read.
type liveness struct {
	state    atomic.Uint32
	interval atomic.Int64 // probe interval in ns

	// Probing, written by the handshake loop.
	lastProbe  atomic.Int64  // mono ns the last probe was sent
	probesSent atomic.Uint64 // probes sent to the gateway
	// probeSendFails counts probes the kernel refused to send to the
	// gateway (prober.send, in the handshake loop).
	probeSendFails atomic.Uint64
	rtt            atomic.Int64  // ns, round trip of the newest answered probe; 0: none
	probeReplies   atomic.Uint64 // answers to our probes
	// acked is the mono ns of the newest evidence that our packets
	// reach the gateway (0: none yet; see above).
	acked atomic.Int64
	// cannotDeliver is the gateway's flagCannotDeliver as its newest
	// control message said; written by the outside loop.
	cannotDeliver atomic.Bool
	// draining is the gateway's flagDraining as its newest control
	// message said; written by the outside loop.
	draining atomic.Bool
	// reason is why the state is LiveDown (a DownReason); written by
	// the handshake loop.
	reason atomic.Uint32
	// pmtu is the path MTU prober (probestate.PathMTU names its
	// writers).
	pmtu probestate.PathMTU
	// inflight is the probes whose answers count (probestate.InFlight).
	inflight probestate.InFlight
	// damp decides when a gateway that went down is up again
	// (probestate.Damper); handshake loop only.
	damp probestate.Damper

	// Transitions, written by the handshake loop.
	changedMono atomic.Int64  // mono ns of the last state change; 0: never
	downs       atomic.Uint64 // times it went from up to down (failovers away from it)

	// Traffic, handshake loop only: the data packets sent (the Peer's
	// txPackets) when evaluate last looked, until when the gateway
	// counts as active, and since when.
	lastTx                   uint64
	activeUntil, activeSince int64
}

// probeTimeout is how long a probe may stay unanswered, in ns, for a
// gateway probed every iv with the round trip rtt: three round trips, at
// least two intervals and at most ProbeMisses (a probe older than that
// is one the state machine already counted as missed). Its answer is
// refused after that (probestate.InFlight).
func probeTimeout(iv, rtt int64) int64 {
	return min(max(2*iv, 3*rtt), ProbeMisses*iv)
}

// timeout is how long a probe may stay unanswered (probeTimeout). Any
// goroutine.
func (l *liveness) timeout() int64 { return probeTimeout(l.interval.Load(), l.rtt.Load()) }

func (l *liveness) init(interval time.Duration) {
	l.setInterval(interval)
}

func (l *liveness) setInterval(d time.Duration) {
	l.interval.Store(int64(probeInterval(d)))
}

// probeInterval is the interval a configured value d means: the default
// for zero, else d within [MinProbeInterval, MaxProbeInterval].
func probeInterval(d time.Duration) time.Duration {
	if d <= 0 {
		return DefaultProbeInterval
	}
	return clampDuration(d, MinProbeInterval, MaxProbeInterval)
}

func clampDuration(d, lo, hi time.Duration) time.Duration {
	return min(max(d, lo), hi)
}

// State is the current liveness state.
func (l *liveness) State() LiveState { return LiveState(l.state.Load()) }

// up reports whether the gateway is up. The data path calls it per packet.
func (l *liveness) up() bool { return l.state.Load() == uint32(LiveUp) }

// probeAction is what the handshake loop should do for one gateway after
// evaluate.
type probeAction struct {
	probe   bool      // send a probe now
	changed bool      // the state changed; log it
	from    LiveState // state before the change
}

// evaluate moves the state machine to mono, the gateway having last
// proved that our packets reach it at acked (0: never) and been sent tx
// data packets so far, and says
// whether to probe. It runs in the handshake loop only. session says
// whether a usable session exists: without one nothing is probed (the
// handshake loop sets one up) and a gateway cannot be up, since nothing
// could be sent to it.
//
// A gateway we sent data to within ActiveWindow is probed every interval
// and goes down after ProbeMisses silent intervals; an idle one uses
// IdleProbeFactor times the interval. When traffic starts, silence is
// counted from then, so a gateway probed at the idle pace is not marked
// down before a fast probe could be answered. A gateway that went down
// comes back up only once its flaps are damped (probestate.Damper); from its
// first sign of life it is probed at the full pace until then.
func (l *liveness) evaluate(mono, acked int64, tx uint64, session bool) probeAction {
	var a probeAction
	replies := l.probeReplies.Load()
	if l.inflight.Expire(mono, l.timeout()) > 0 || l.cannotDeliver.Load() || l.draining.Load() {
		l.damp.Restart(replies)
	}
	if tx != l.lastTx {
		if mono >= l.activeUntil {
			l.activeSince = mono
		}
		l.lastTx = tx
		l.activeUntil = mono + int64(ActiveWindow)
	}
	iv := l.interval.Load()
	ref := acked
	cur := LiveState(l.state.Load())
	// Down, but heard from since: probed at the full pace until it is
	// up, so that damping counts its answers in intervals, not idle ones
	// (its flows left it, so it looks idle).
	recovering := cur == LiveDown && acked > l.changedMono.Load()
	if mono < l.activeUntil {
		ref = max(acked, l.activeSince)
	} else if !recovering {
		iv *= IdleProbeFactor
	}
	silent := mono - ref
	next, reason := cur, DownReason(l.reason.Load())
	switch {
	case acked == 0:
		// Never proved: stays connecting.
	case silent > ProbeMisses*iv:
		if cur == LiveUp || reason == DownDraining {
			// Up and silent, or gone silent while draining (its
			// process exited): its flag is old news.
			next, reason = LiveDown, DownNoAnswer
			l.draining.Store(false)
		}
	case l.cannotDeliver.Load():
		// It answers but cannot deliver: no flows for it.
		if cur == LiveUp {
			next, reason = LiveDown, DownCannotDeliver
		}
	case l.draining.Load():
		// It answers but is shutting down: no flows for it.
		if cur == LiveUp {
			next, reason = LiveDown, DownDraining
		}
	case session && acked > l.changedMono.Load() && (cur != LiveDown || l.damp.Recovered(replies)):
		// Proved since the last change (or ever), with a session to
		// send on, and, after a down, answering steadily again.
		next, reason = LiveUp, DownNone
	}
	if next == cur && cur == LiveDown && reason != DownReason(l.reason.Load()) {
		l.reason.Store(uint32(reason)) // down still, for another reason
	}
	if next != cur {
		l.reason.Store(uint32(reason))
		l.state.Store(uint32(next))
		l.changedMono.Store(mono)
		if next == LiveDown {
			l.downs.Add(1)
			if reason == DownDraining {
				l.damp.Drained(replies)
			} else {
				l.damp.Down(mono, replies)
			}
		}
		a.changed, a.from = true, cur
	}
	if session && acked != 0 && mono-acked >= iv && mono-l.lastProbe.Load() >= iv {
		a.probe = true
	}
	return a
}

// active reports whether we sent the gateway data within ActiveWindow
// (as of the last evaluate). Handshake loop only.
func (l *liveness) active(mono int64) bool { return mono < l.activeUntil }

// LivenessStats is a snapshot of a gateway's liveness.
// Durations are nanoseconds in JSON.
type LivenessStats struct {
	State LiveState `json:"state"`
	// ProbeInterval is the gateway's probe interval.
	ProbeInterval time.Duration `json:"probeInterval"`
	// ProbeRTT is the round trip of the newest answered probe (0: none).
	ProbeRTT time.Duration `json:"probeRTT"`
	// ProbesSent and ProbeReplies count probes to the gateway and their
	// answers.
	ProbesSent   uint64 `json:"probesSent"`
	ProbeReplies uint64 `json:"probeReplies"`
	// ProbeSendFailures counts the probes of ProbesSent that the kernel
	// refused to send (a prohibit or blackhole route, no route).
	ProbeSendFailures uint64 `json:"probeSendFailures,omitempty"`
	// Reason says why State is LiveDown (empty otherwise).
	Reason DownReason `json:"reason,omitzero"`
	// CannotDeliver is set while the gateway reports that it cannot
	// deliver to its own site (its LAN side is broken).
	CannotDeliver bool `json:"cannotDeliver,omitempty"`
	// Draining is set while the gateway reports that it is shutting
	// down.
	Draining bool `json:"draining,omitempty"`
	// PathMTU is the largest inner packet the path to the gateway is
	// known to carry, from padded probes (0: not checked yet); the
	// tunnel MTU while the path is whole.
	PathMTU int `json:"pathMTU"`
	// MTUDegraded is set while full-size probes go unanswered and small
	// ones pass: the gateway gets no flows while a whole one of its
	// site is up.
	MTUDegraded bool `json:"mtuDegraded,omitempty"`
	// LastAck is the newest evidence that our packets reach the
	// gateway: a probe answered, or a handshake (zero: none yet).
	LastAck time.Time `json:"lastAck,omitzero"`
	// LastChange is when State last changed (zero: never).
	LastChange time.Time `json:"lastChange,omitzero"`
	// Downs counts the times the gateway went down: each moved its flows
	// to the site's other gateways.
	Downs uint64 `json:"downs"`
}

func (l *liveness) stats(mono monoEpoch) LivenessStats {
	return LivenessStats{
		State:             l.State(),
		Reason:            DownReason(l.reason.Load()),
		CannotDeliver:     l.cannotDeliver.Load(),
		Draining:          l.draining.Load(),
		PathMTU:           l.pmtu.MTU(),
		MTUDegraded:       l.pmtu.Degraded(),
		ProbeInterval:     time.Duration(l.interval.Load()),
		ProbeRTT:          time.Duration(l.rtt.Load()),
		ProbesSent:        l.probesSent.Load(),
		ProbeReplies:      l.probeReplies.Load(),
		ProbeSendFailures: l.probeSendFails.Load(),
		LastAck:           mono.time(l.acked.Load()),
		LastChange:        mono.time(l.changedMono.Load()),
		Downs:             l.downs.Load(),
	}
}
