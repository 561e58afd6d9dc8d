package daemon

import (
	"context"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/sdnotify"
)

// The drain: how a gateway stops on SIGTERM without losing traffic (a
// rolling upgrade, a reimage, systemctl stop).
//
//  1. /readyz answers 503 with "draining": true at once, so the load
//     balancer or keepalived in front of the site's gateways (or the
//     lab's lb-watch over ECMP routes) moves the LAN side's traffic to
//     the others.
//  2. Every control message says so (router.SetDraining), and a probe
//     goes to every remote gateway at the next probe tick: they take
//     this one down (reason draining) within a round trip and move its
//     flows to the site's other gateways, without waiting for missed
//     probes. When every peer with a session got a probe since, the
//     drain logs "peers notified".
//  3. It keeps forwarding whatever still reaches it, either way, until
//     no data crossed it for drain.quiet (the data bytes sent to and
//     received from every remote gateway; probes and keepalives carry
//     none) or drain.timeout passed. Then Run stops the router and
//     tears down as on any stop.
//
// A second SIGTERM or SIGINT (StopSignals) cancels Run's context: it
// stops at once, mid-drain.

// drainPoll is how often the drain reads the router's counters.
const drainPoll = 50 * time.Millisecond

// drainRouter is what the drain needs of the router.
type drainRouter interface {
	SetDraining(bool)
	Peers() []router.PeerStats
}

// drainer runs one gateway's drain. It is owned by the goroutine that
// calls run; setDraining (the readiness flag) is called from it and read
// by anyone.
type drainer struct {
	log   *slog.Logger
	r     drainRouter
	clock router.Clock
	// setDraining turns readiness off (the gateway's draining flag).
	setDraining func()
	// status tells systemd what the drain is doing (sdnotify STATUS=).
	status func(string)
}

// drainOutcome is how a drain ended.
type drainOutcome string

const (
	drainQuiet    drainOutcome = "drained"  // no data for drain.quiet
	drainDeadline drainOutcome = "deadline" // drain.timeout passed
	drainCut      drainOutcome = "cut"      // ctx ended: a second signal
)

// drainReport is what a drain saw, for its log lines and tests.
type drainReport struct {
	Outcome drainOutcome
	Took    time.Duration
	// Peers had a session when the drain started; Notified got a probe
	// (saying draining) since.
	Peers, Notified int
	// Bytes of data crossed the gateway during the drain; LastData is
	// when the newest did, from the drain's start (0: none).
	Bytes    uint64
	LastData time.Duration
}

// peerCounters sums the data bytes sent to and received from every
// remote gateway, and returns per gateway the probes sent so far for
// those with a session.
func peerCounters(ps []router.PeerStats) (bytes uint64, probes map[string]uint64) {
	probes = make(map[string]uint64, len(ps))
	for _, p := range ps {
		bytes += p.TxBytes + p.RxBytes
		if !p.SessionCreated.IsZero() {
			probes[p.Site+"/"+p.Name] = p.Live.ProbesSent
		}
	}
	return bytes, probes
}

// run drains the gateway: readiness off, peers told, then wait for
// quiet or the deadline, or for ctx to end. It logs each step once.
func (d *drainer) run(ctx context.Context, timeout, quiet time.Duration) drainReport {
	start := d.clock.Now()
	d.setDraining()
	d.r.SetDraining(true)
	bytes0, probes0 := peerCounters(d.r.Peers())
	rep := drainReport{Peers: len(probes0)}
	d.log.Info("drain started: /readyz answers 503 and remote gateways are told to move this gateway's flows",
		"peers_with_session", rep.Peers, "timeout", timeout, "quiet", quiet)
	d.status("draining")
	tick, stop := d.clock.Ticker(drainPoll)
	defer stop()
	last, lastChange := bytes0, start
	notified := rep.Peers == 0
	if notified {
		d.log.Info("peers notified", "notified", 0, "peers_with_session", 0)
	}
	for {
		select {
		case <-ctx.Done():
			rep.Outcome, rep.Took = drainCut, d.clock.Now().Sub(start)
			d.log.Warn("drain cut short by a second signal: stopping now",
				"after", rep.Took.Round(time.Millisecond), "bytes_during_drain", rep.Bytes, "peers_notified", rep.Notified)
			return rep
		case <-tick:
		}
		now := d.clock.Now()
		ps := d.r.Peers()
		bytes, probes := peerCounters(ps)
		if bytes != last {
			last, lastChange = bytes, now
			rep.Bytes, rep.LastData = bytes-bytes0, now.Sub(start)
		}
		if !notified {
			rep.Notified = 0
			for k, n := range probes0 {
				if probes[k] > n {
					rep.Notified++
				}
			}
			if rep.Notified == rep.Peers || now.Sub(start) >= time.Second {
				notified = true
				d.log.Info("peers notified", "notified", rep.Notified, "peers_with_session", rep.Peers,
					"after", now.Sub(start).Round(time.Millisecond))
			}
		}
		switch {
		case now.Sub(lastChange) >= quiet:
			rep.Outcome = drainQuiet
		case now.Sub(start) >= timeout:
			rep.Outcome = drainDeadline
		default:
			continue
		}
		rep.Took = now.Sub(start)
		if rep.Outcome == drainQuiet {
			d.log.Info("drained: no data crossed the gateway for the quiet time",
				"took", rep.Took.Round(time.Millisecond), "quiet", quiet, "bytes_during_drain", rep.Bytes,
				"last_data_after", rep.LastData.Round(time.Millisecond), "peers_notified", rep.Notified)
		} else {
			d.log.Warn("drain deadline passed with data still crossing the gateway: stopping anyway",
				"timeout", timeout, "bytes_during_drain", rep.Bytes, "last_data_after", rep.LastData.Round(time.Millisecond),
				"peers_notified", rep.Notified)
		}
		return rep
	}
}

// StopSignals is how `bridgehead run` stops: the first SIGTERM or
// SIGINT closes drain (Options.Drain: the gateway drains, then Run
// returns), a second one cancels ctx (Run stops at once). stop releases
// the signals and waits for the goroutine that watches them.
func StopSignals(parent context.Context, log *slog.Logger) (ctx context.Context, drain <-chan struct{}, stop func()) {
	ctx, cancel := context.WithCancel(parent)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt)
	drainCh := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		select {
		case s := <-sigs:
			log.Info("signal: draining before exit (send it again to stop at once)", "signal", s.String())
			close(drainCh)
		case <-ctx.Done():
			return
		}
		select {
		case s := <-sigs:
			log.Info("second signal: stopping now", "signal", s.String())
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, drainCh, func() {
		signal.Stop(sigs)
		cancel()
		<-done
	}
}

// drainOn waits for drain to close, then drains the gateway with the
// running config's drain section and calls stop (Run's cancel: the
// router and every loop of Run stop together); it returns at once when
// ctx ends first (a stop without a drain), and a drain cut short by ctx
// (a second signal) ends the same way. Run's goroutine.
func (g *gateway) drainOn(ctx context.Context, drain <-chan struct{}, stop func(), n *sdnotify.Notifier) {
	select {
	case <-ctx.Done():
		return
	case <-drain:
	}
	n.Stopping()
	cfg := g.cfg.Load()
	d := drainer{log: g.log, r: g.r, clock: router.SystemClock{}, setDraining: func() { g.draining.Store(true) }, status: n.Status}
	d.run(ctx, cfg.DrainTimeout(), cfg.DrainQuiet())
	stop()
}
