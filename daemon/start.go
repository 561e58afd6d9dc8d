package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/vishvananda/netlink"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	"github.com/bridgehead/bridgehead/earlydrop"
	"github.com/bridgehead/bridgehead/kube/register"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/transit"
	"github.com/bridgehead/bridgehead/udp"
)

// starter is one start of a gateway: Run's steps, each a method that
// builds or acquires one thing and pushes its undo on undo, and what the
// steps have made so far for the next ones. Only Run's goroutine uses it;
// the gateway it makes is shared once serve starts its goroutines.
type starter struct {
	o    Options
	log  *slog.Logger
	reg  *prometheus.Registry
	undo undoStack

	// followed is told when the follower writes the catalog.
	followed chan struct{}
	// v is the start-up config; serve drops it once the gateway runs,
	// so that a reload does not keep two configs alive.
	v      *validConfig
	kc     dynamic.Interface // nil without a kubernetes section
	mtu    int
	nlanes int
	prio   int // the express lane's real-time priority, 0 when off

	ld *laneDevices
	// dropLanes takes the devices' close off undo: the router closes
	// them once it has run.
	dropLanes func()
	keepP     bool
	filter    router.KernelFilter // nil without the kernel filter
	hub       *transit.Relay
	tbind     *transit.Bind
	r         *router.Router
	ns        *netsetup.Setup
	want      netsetup.Want // the start-up config's kernel state
	g         *gateway
	pub       *register.Publisher
}

func newStarter(o Options) *starter {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &starter{o: o, log: log, reg: prometheus.NewRegistry(), followed: make(chan struct{}, 1)}
}

// followCatalog starts the follower of a followed catalog
// (kubernetes.follow), which fetches it first when there is no file of
// it yet; its writes reload like file changes. It runs until ctx ends.
func (s *starter) followCatalog(ctx context.Context) error {
	stop, err := startFollow(ctx, s.o.ConfigPath, s.o.Overrides, s.reg, s.followed, s.log)
	if err != nil {
		return err
	}
	s.undo.push(stop)
	return nil
}

// loadConfig reads and validates the config the way every reload does
// (validate), then derives what only a start reads: the Kubernetes
// client and the tunnel MTU.
func (s *starter) loadConfig() error {
	data, err := config.ReadFile(s.o.ConfigPath)
	if err != nil {
		return err
	}
	s.v, err = validate(s.o.ConfigPath, data, config.CheckOptions{Overrides: s.o.Overrides}, nil, time.Now(), s.log)
	if err != nil {
		return fmt.Errorf("refusing to start with a bad config:\n%w", err)
	}
	if s.kc, err = kubeClient(s.v.cfg); err != nil {
		return err
	}
	s.mtu, err = tunnelMTU(s.v.cfg, s.log)
	return err
}

// openDevices opens the lanes' TUN queues and sockets (lanes.go) and
// gives the express lane's real-time loops their Ps (procs.go).
func (s *starter) openDevices() error {
	cfg := s.v.cfg
	s.nlanes = cfg.LaneCount()
	if s.o.Lanes > 0 {
		s.nlanes = s.o.Lanes
	}
	missing := s.o.MissingCaps
	if missing == nil {
		missing = missingRealtimeCaps
	}
	s.prio = expressPriority(cfg, s.o.ExpressPriority, missing, s.log)
	ld, err := openLanes(cfg.Interface.Name, s.mtu, cfg.OffloadEnabled(), cfg.ListenAddr, s.nlanes, cfg.ExpressEnabled() && !s.o.NoExpress, s.prio > 0, s.log)
	if err != nil {
		return err
	}
	s.ld, s.dropLanes = ld, s.undo.push(ld.close)
	undoProcs, keepP := expressProcs(expressLoops(ld, s.prio), s.log)
	s.undo.push(undoProcs)
	s.keepP = keepP
	return nil
}

// attachFilter attaches the kernel early-drop filter to the sockets when
// earlyDrop is on and the kernel lets it; without it every datagram is
// checked in userspace, which is no failure.
func (s *starter) attachFilter() error {
	if !s.v.cfg.EarlyDropEnabled() {
		s.log.Info("kernel early-drop filter turned off by earlyDrop")
		return nil
	}
	conns := s.ld.conns()
	f, err := earlydrop.Attach(conns[0], conns[1:]...)
	switch {
	case err != nil && errors.Is(err, os.ErrPermission):
		s.log.Warn("kernel early-drop filter needs CAP_BPF; every datagram is checked in userspace (earlyDrop: false turns it off)", "err", err)
	case err != nil:
		s.log.Warn("kernel early-drop filter unavailable; every datagram is checked in userspace", "err", err)
	default:
		s.undo.push(func() { f.Close() })
		s.filter = f
		s.log.Info("kernel early-drop filter attached to the outside socket", "listen", s.ld.binds[0].LocalAddr())
	}
	return nil
}

// buildRouter makes the router on the devices, behind the relay path
// (sites behind NAT, package transit) that sits between it and the
// sockets, and gives it the config and key ring.
func (s *starter) buildRouter() error {
	v := s.v
	hub, err := transit.New(nil, s.reg)
	if err != nil {
		return err
	}
	table := &routerTable{}
	s.hub, s.tbind = hub, transit.NewBind(s.ld.binds[0], table, hub, s.mtu)
	hub.SetPlan(v.plan, v.self)
	lanes := s.ld.routerLanes(func(b udp.Bind) udp.Bind { return transit.NewBind(b, table, hub, s.mtu) })
	var express udp.Bind
	if s.ld.express != nil {
		express = transit.NewBind(s.ld.express, table, hub, s.mtu)
	}
	r, err := router.New(router.Options{TUN: s.ld.tuns[0], Bind: s.tbind, Lanes: lanes, Express: express, ExpressTUN: s.ld.expressTUN,
		ExpressSteered: s.ld.steered, ExpressPriority: s.prio, ExpressKeepsP: s.keepP, Identity: v.ring.Current, Logger: s.log, Filter: s.filter,
		RekeyAfter: s.o.RekeyAfter, CoDelTarget: v.cfg.CoDel.Target, CoDelInterval: v.cfg.CoDel.Interval})
	if err != nil {
		return err
	}
	table.r.Store(r)
	s.r = r
	if err := r.SetConfig(v.router); err != nil {
		return fmt.Errorf("%s: %w", v.cfg.Path, err)
	}
	return r.SetKeyRing(v.ring) // a rollover's previous key (keys.go)
}

// applyRoutes makes the kernel's routes and link settings the config's;
// its undo removes the routes.
func (s *starter) applyRoutes() error {
	ns, err := netsetup.New(s.log)
	if err != nil {
		return err
	}
	s.ns = ns
	s.undo.push(func() {
		if err := ns.Close(); err != nil {
			s.log.Error("removing routes", "err", err)
		} else {
			s.log.Info("routes removed")
		}
	})
	s.want = kernelState(s.v.cfg, s.mtu)
	if err := ns.Apply(s.want); err != nil {
		return fmt.Errorf("kernel setup: %w", err)
	}
	return nil
}

// buildGateway makes the gateway that reloads change, with its metrics,
// its LAN watch (before /readyz is served, which reads it), its
// registration and its mesh view.
func (s *starter) buildGateway() error {
	cfg, r := s.v.cfg, s.r
	g := &gateway{log: s.log, r: r, kern: s.ns, m: newMetricsOn(s.reg, r, s.o.Version, s.ld.sockets()...), id: s.v.ring.Current, mtu: s.mtu,
		version: s.o.Version, started: time.Now(), transit: s.hub, paths: s.tbind,
		checkOpts: config.CheckOptions{Overrides: s.o.Overrides}}
	s.g = g
	g.m.reg.MustRegister(newPathCollector(g.peerStates))
	g.cfg.Store(cfg)
	g.keyDigest = keyFileDigest(cfg)
	if last, err := lastRotation(cfg, nil, time.Now()); err == nil && last.Previous != nil {
		g.rotation.Store(last) // for the Gateway status (keys.go)
	}
	links := lanLinks{h: &netlink.Handle{}}
	g.lan = lanWatch{log: s.log, cfg: g.cfg.Load, probe: links.probe, resolve: links.side, deliver: r.SetCanDeliver,
		targets: newLANTargets(s.log, func() time.Duration { return time.Since(g.started) })}
	g.loaded.Store(time.Now().UnixNano())
	g.m.configInfo.WithLabelValues(cfg.Path, cfg.Hash()).Set(1)
	g.m.lastReload.SetToCurrentTime()
	var err error
	if s.pub, err = newPublisher(cfg, s.kc, g, s.log); err != nil {
		return err
	}
	g.mesh, err = newMeshView(g, s.kc, s.log)
	return err
}

// listenMetrics serves /metrics, the health and the mesh endpoints when
// metrics.listen is set.
func (s *starter) listenMetrics() error {
	if s.v.cfg.Metrics.Listen == "" {
		return nil
	}
	srv, err := serveMetrics(s.v.cfg.Metrics.Listen, s.g, s.log)
	if err != nil {
		return err
	}
	s.undo.push(func() { srv.Close() })
	return nil
}

// listenRelay starts the CONNECT relay when the config has one. Its undo
// closes whichever relay runs then: reloads may have moved it.
func (s *starter) listenRelay() error {
	rl, err := startRelay(s.v.cfg, s.g.m.reg, s.log)
	if err != nil {
		return err
	}
	s.g.relay.Store(rl)
	g := s.g
	s.undo.push(func() {
		// Reloads have stopped by now.
		if rl := g.relay.Load(); rl != nil {
			rl.Close()
		}
	})
	return nil
}

// listenControl opens the control socket (bridgehead status).
func (s *starter) listenControl() error {
	ctl, err := control.Listen(controlSocket(s.v.cfg), s.g.status, s.log)
	if err != nil {
		return fmt.Errorf("control socket: %w", err)
	}
	s.undo.push(func() { ctl.Close() })
	return nil
}
