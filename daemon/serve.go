package daemon

import (
	"context"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/sdnotify"
)

// serve runs the started gateway until ctx is cancelled or it has
// drained: the reload triggers and route repair, the ops, LAN watch,
// registration and mesh loops, the drain, and the router, which owns the
// devices from here on. It returns the router's error once every loop has
// stopped; Run's undo stack then releases the rest.
func (s *starter) serve(parent context.Context) error {
	g, log := s.g, s.log
	notify := sdnotify.New(log)
	ctx, cancel := context.WithCancel(parent)
	s.undo.push(cancel)
	changed := s.watchFiles(ctx)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	s.undo.push(func() { signal.Stop(hup) })
	repair := time.NewTicker(s.watchRoutes(ctx))
	s.undo.push(repair.Stop)
	// The loop keeps only the path: the start-up config (tens of MB for
	// a large catalog) must not stay alive after every reload.
	path, followed := s.v.cfg.Path, s.followed
	reloads := goDone(func() { g.reloadLoop(ctx, path, notify, hup, changed, followed, repair.C) })
	s.logUp()
	s.v, s.want = nil, netsetup.Want{}
	g.lan.check() // before the first probe goes out, and before the ops loop reads it
	ops := goDone(func() { g.opsLoop(ctx, notify) })
	lan := goDone(func() { g.lan.run(ctx) })
	stopRegister := runPublisher(ctx, s.pub)
	stopMesh := g.mesh.run(ctx)
	notify.Ready()
	if s.o.Ready != nil {
		s.o.Ready()
	}
	drained := goDone(func() { g.drainOn(ctx, s.o.Drain, cancel, notify) })
	s.dropLanes() // the router closes its devices when it returns
	err := s.r.Run(ctx)
	notify.Stopping()
	cancel()
	<-drained
	<-reloads
	<-ops
	<-lan
	stopRegister()
	stopMesh()
	log.Info("gateway stopping")
	return err
}

// logUp says that the gateway is up and with what.
func (s *starter) logUp() {
	cfg := s.v.cfg
	s.log.Info("gateway up",
		"site", cfg.Site, "gateway", cfg.Gateway, "interface", cfg.Interface.Name, "mtu", s.mtu,
		"listen", s.ld.binds[0].LocalAddr(), "lanes", s.nlanes, "cipher", s.g.id.Cipher, "public_key", s.g.id.Public,
		"peers", len(s.r.Peers()), "tunnel_routes", len(s.want.Tunnel), "node_routes", len(s.want.Via),
		"config", cfg.Path, "config_hash", cfg.Hash())
}

// watchFiles watches the config file, a followed catalog's file (the
// config's too: kubernetes.follow writes it; an operator may too) and the
// key files (keys.go) until ctx ends, and tells the returned channel of
// their changes. A watch that cannot start is logged: SIGHUP still works.
func (s *starter) watchFiles(ctx context.Context) <-chan struct{} {
	cfg, log := s.v.cfg, s.log
	changed := make(chan struct{}, 1)
	if _, err := filewatch.Start(ctx, cfg.Path, ReloadDebounce, changed, log); err != nil {
		log.Warn("config file changes will not be noticed; reload with SIGHUP", "err", err)
	}
	if cat := cfg.CatalogPath(); cat != "" {
		if _, err := filewatch.Start(ctx, cat, ReloadDebounce, changed, log); err != nil {
			log.Warn("catalog file changes will not be noticed; reload with SIGHUP", "catalog", cat, "err", err)
		}
	}
	watchKeyFiles(ctx, cfg, changed, log)
	return changed
}

// watchRoutes has route notifications put back what is deleted as it
// happens, until ctx ends, and returns how often every route is checked:
// with notifications a rare backstop, without them every
// routeRepairInterval.
func (s *starter) watchRoutes(ctx context.Context) time.Duration {
	g, ns := s.g, s.ns
	if err := ns.WatchRoutes(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.repairRoutes()
	}); err != nil {
		s.log.Warn("route notifications unavailable; checking every route every 30 s instead", "err", err)
		return routeRepairInterval
	}
	for _, res := range []string{"repaired", "failed"} {
		g.m.reg.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "bridgehead_route_repairs_total", Help: "Kernel routes of ours that were deleted and put back (repaired) or could not be (failed), from route notifications.",
			ConstLabels: prometheus.Labels{"result": res},
		}, func() float64 {
			ok, failed := ns.Repairs()
			if res == "failed" {
				return float64(failed)
			}
			return float64(ok)
		}))
	}
	return routeBackstopInterval
}

// reloadLoop reloads path on SIGHUP, on a change of the watched files and
// on a write of the followed catalog, telling systemd, and repairs the
// routes at each tick of repair, until ctx ends.
func (g *gateway) reloadLoop(ctx context.Context, path string, notify *sdnotify.Notifier, hup <-chan os.Signal, changed, followed <-chan struct{}, repair <-chan time.Time) {
	reload := func(why string) {
		notify.Reloading()
		g.reload(path, why)
		notify.Ready()
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-repair:
			g.mu.Lock()
			g.repairRoutes()
			g.mu.Unlock()
		case <-hup:
			reload("SIGHUP")
		case <-changed:
			reload(triggerWatch)
		case <-followed:
			reload(triggerFollow)
		}
	}
}

// goDone runs f in a goroutine and closes the returned channel when f
// has returned.
func goDone(f func()) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f()
	}()
	return done
}
