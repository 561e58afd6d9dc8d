package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/vishvananda/netlink"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/earlydrop"
	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/sdnotify"
	"github.com/bridgehead/bridgehead/transit"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// Options configure Run.
type Options struct {
	ConfigPath string
	Logger     *slog.Logger
	Version    string
	// Ready, if set, is called once the TUN, routes and socket are up.
	Ready func()
	// RekeyAfter shortens the session rekey interval (router.Options);
	// for tests that watch sessions rotate. Zero keeps the default.
	RekeyAfter time.Duration
	// Lanes overrides the config's lanes (router.Lane) when positive.
	Lanes int
	// NoExpress runs without the express lane (router.Options.Express,
	// udp.ListenExpress) whatever the config's express says: sparse
	// flows then share the lanes' sockets.
	NoExpress bool
	// ExpressPriority, if not nil, replaces the config's
	// expressPriority (run --express-priority): 0 turns it off.
	ExpressPriority *int
	// MissingCaps, if set, replaces the check of this process's
	// capabilities that decides whether the default express priority
	// applies (missingRealtimeCaps); for tests.
	MissingCaps func() []string
	// Overrides replace fields of the config file at start and at every
	// reload (run --gateway: one file for a DaemonSet's gateways).
	Overrides config.Overrides
	// Drain, when closed, makes the gateway drain (drain.go: /readyz
	// 503, peers told, forwarding until quiet or drain.timeout) and
	// then return; cancelling ctx still stops it at once. StopSignals
	// makes both from SIGTERM and SIGINT. nil: never.
	Drain <-chan struct{}
}

// Run loads the config and runs the gateway until ctx is cancelled, or
// until it has drained once Options.Drain is closed. It reloads the
// config on SIGHUP and when the file changes. On return every route it
// added is removed and the TUN is gone.
func Run(ctx context.Context, o Options) error {
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// A followed catalog (kubernetes.follow) is fetched first when
	// there is no file of it yet; its writes reload like file changes.
	reg := prometheus.NewRegistry()
	followed := make(chan struct{}, 1)
	stopFollow, err := startFollow(ctx, o.ConfigPath, o.Overrides, reg, followed, log)
	if err != nil {
		return err
	}
	defer stopFollow()
	data, err := config.ReadFile(o.ConfigPath)
	if err != nil {
		return err
	}
	// The same validation as every reload (validate).
	v, err := validate(o.ConfigPath, data, config.CheckOptions{Overrides: o.Overrides}, nil, time.Now(), log)
	if err != nil {
		return fmt.Errorf("refusing to start with a bad config:\n%w", err)
	}
	cfg, id, rc := v.cfg, v.ring.Current, v.router
	kc, err := kubeClient(cfg)
	if err != nil {
		return err
	}
	mtu, err := tunnelMTU(cfg, log)
	if err != nil {
		return err
	}

	nlanes := cfg.LaneCount()
	if o.Lanes > 0 {
		nlanes = o.Lanes
	}
	missing := o.MissingCaps
	if missing == nil {
		missing = missingRealtimeCaps
	}
	prio := expressPriority(cfg, o.ExpressPriority, missing, log)
	ld, err := openLanes(cfg.Interface.Name, mtu, cfg.OffloadEnabled(), cfg.ListenAddr, nlanes, cfg.ExpressEnabled() && !o.NoExpress, prio > 0, log)
	if err != nil {
		return err
	}
	dev, bind := ld.tuns[0], ld.binds[0]
	undoProcs, keepP := expressProcs(expressLoops(ld, prio), log)
	defer undoProcs()
	var filter router.KernelFilter
	if cfg.EarlyDropEnabled() {
		conns := ld.conns()
		f, err := earlydrop.Attach(conns[0], conns[1:]...)
		switch {
		case err != nil && errors.Is(err, os.ErrPermission):
			log.Warn("kernel early-drop filter needs CAP_BPF; every datagram is checked in userspace (earlyDrop: false turns it off)", "err", err)
		case err != nil:
			log.Warn("kernel early-drop filter unavailable; every datagram is checked in userspace", "err", err)
		default:
			defer f.Close()
			filter = f
			log.Info("kernel early-drop filter attached to the outside socket", "listen", bind.LocalAddr())
		}
	} else {
		log.Info("kernel early-drop filter turned off by earlyDrop")
	}
	// The relay path (sites behind NAT, package transit) sits between
	// the router and the socket.
	hub, err := transit.New(nil, reg)
	if err != nil {
		ld.close()
		return err
	}
	table := &routerTable{}
	tbind := transit.NewBind(bind, table, hub, mtu)
	hub.SetPlan(v.plan, v.self)
	lanes := ld.routerLanes(func(b udp.Bind) udp.Bind { return transit.NewBind(b, table, hub, mtu) })
	var express udp.Bind
	if ld.express != nil {
		express = transit.NewBind(ld.express, table, hub, mtu)
	}
	r, err := router.New(router.Options{TUN: dev, Bind: tbind, Lanes: lanes, Express: express, ExpressTUN: ld.expressTUN,
		ExpressSteered: ld.steered, ExpressPriority: prio, ExpressKeepsP: keepP, Identity: id, Logger: log, Filter: filter, RekeyAfter: o.RekeyAfter,
		CoDelTarget: cfg.CoDel.Target, CoDelInterval: cfg.CoDel.Interval})
	if err != nil {
		ld.close()
		return err
	}
	table.r.Store(r)
	if err := r.SetConfig(rc); err != nil {
		ld.close()
		return fmt.Errorf("%s: %w", cfg.Path, err)
	}
	if err := r.SetKeyRing(v.ring); err != nil { // a rollover's previous key (keys.go)
		ld.close()
		return err
	}
	ns, err := netsetup.New(log)
	if err != nil {
		ld.close()
		return err
	}
	defer func() {
		if err := ns.Close(); err != nil {
			log.Error("removing routes", "err", err)
		} else {
			log.Info("routes removed")
		}
	}()
	want := kernelState(cfg, mtu)
	if err := ns.Apply(want); err != nil {
		ld.close()
		return fmt.Errorf("kernel setup: %w", err)
	}

	g := &gateway{log: log, r: r, kern: ns, m: newMetricsOn(reg, r, o.Version, ld.sockets()...), id: id, mtu: mtu,
		version: o.Version, started: time.Now(), transit: hub, paths: tbind,
		checkOpts: config.CheckOptions{Overrides: o.Overrides}}
	g.m.reg.MustRegister(newPathCollector(g.peerStates))
	g.cfg.Store(cfg)
	g.keyDigest = keyFileDigest(cfg)
	if last, err := lastRotation(cfg, nil, time.Now()); err == nil && last.Previous != nil {
		g.rotation.Store(last) // for the Gateway status (keys.go)
	}
	// The LAN watch exists before /readyz is served, which reads it.
	links := lanLinks{h: &netlink.Handle{}}
	g.lan = lanWatch{log: log, cfg: g.cfg.Load, probe: links.probe, resolve: links.side, deliver: r.SetCanDeliver,
		targets: newLANTargets(log, func() time.Duration { return time.Since(g.started) })}
	g.loaded.Store(time.Now().UnixNano())
	g.m.configInfo.WithLabelValues(cfg.Path, cfg.Hash()).Set(1)
	g.m.lastReload.SetToCurrentTime()
	pub, err := newPublisher(cfg, kc, g, log)
	if err != nil {
		ld.close()
		return err
	}
	if g.mesh, err = newMeshView(g, kc, log); err != nil {
		ld.close()
		return err
	}
	if cfg.Metrics.Listen != "" {
		srv, err := serveMetrics(cfg.Metrics.Listen, g, log)
		if err != nil {
			ld.close()
			return err
		}
		defer srv.Close()
	}

	rl, err := startRelay(cfg, g.m.reg, log)
	if err != nil {
		ld.close()
		return err
	}
	g.relay.Store(rl)
	defer func() {
		// Reloads have stopped by now; the relay may have moved.
		if rl := g.relay.Load(); rl != nil {
			rl.Close()
		}
	}()

	ctl, err := control.Listen(controlSocket(cfg), g.status, log)
	if err != nil {
		ld.close()
		return fmt.Errorf("control socket: %w", err)
	}
	defer ctl.Close()
	notify := sdnotify.New(log)

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	changed := make(chan struct{}, 1)
	if _, err := filewatch.Start(ctx, cfg.Path, ReloadDebounce, changed, log); err != nil {
		log.Warn("config file changes will not be noticed; reload with SIGHUP", "err", err)
	}
	// A followed catalog's file is the config's too: its changes reload
	// the same way (kubernetes.follow writes it; an operator may too).
	if cat := cfg.CatalogPath(); cat != "" {
		if _, err := filewatch.Start(ctx, cat, ReloadDebounce, changed, log); err != nil {
			log.Warn("catalog file changes will not be noticed; reload with SIGHUP", "catalog", cat, "err", err)
		}
	}
	watchKeyFiles(ctx, cfg, changed, log) // key files reload too (keys.go)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	reloads := make(chan struct{})
	// The loop keeps only the path: capturing cfg would keep the start-up
	// config (tens of MB for a large catalog) alive after every reload.
	path := cfg.Path
	// Route notifications put back what is deleted as it happens; the
	// full check (a dump of every route) is then a rare backstop.
	repairEvery := routeRepairInterval
	if err := ns.WatchRoutes(ctx, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.repairRoutes()
	}); err != nil {
		log.Warn("route notifications unavailable; checking every route every 30 s instead", "err", err)
	} else {
		repairEvery = routeBackstopInterval
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
	}
	repair := time.NewTicker(repairEvery)
	defer repair.Stop()
	go func() {
		defer close(reloads)
		for {
			select {
			case <-ctx.Done():
				return
			case <-repair.C:
				g.mu.Lock()
				g.repairRoutes()
				g.mu.Unlock()
			case <-hup:
				notify.Reloading()
				g.reload(path, "SIGHUP")
				notify.Ready()
			case <-changed:
				notify.Reloading()
				g.reload(path, triggerWatch)
				notify.Ready()
			case <-followed:
				notify.Reloading()
				g.reload(path, triggerFollow)
				notify.Ready()
			}
		}
	}()

	log.Info("gateway up",
		"site", cfg.Site, "gateway", cfg.Gateway, "interface", cfg.Interface.Name, "mtu", mtu,
		"listen", bind.LocalAddr(), "lanes", nlanes, "cipher", id.Cipher, "public_key", id.Public,
		"peers", len(r.Peers()), "tunnel_routes", len(want.Tunnel), "node_routes", len(want.Via),
		"config", cfg.Path, "config_hash", cfg.Hash())
	g.lan.check() // before the first probe goes out, and before the ops loop reads it
	ops := make(chan struct{})
	go func() {
		defer close(ops)
		g.opsLoop(ctx, notify)
	}()
	lan := make(chan struct{})
	go func() {
		defer close(lan)
		g.lan.run(ctx)
	}()
	stopRegister := runPublisher(ctx, pub)
	stopMesh := g.mesh.run(ctx)
	notify.Ready()
	if o.Ready != nil {
		o.Ready()
	}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		g.drainOn(ctx, o.Drain, cancel, notify)
	}()
	err = r.Run(ctx)
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

// identity reads the private key and builds the handshake identity.
func identity(cfg *config.Config) (*bhcrypto.Identity, error) {
	raw, err := os.ReadFile(cfg.PrivateKeyPath())
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile: %w", cfg.Path, err)
	}
	priv, err := bhcrypto.ParsePrivateKey(string(raw))
	if err != nil {
		return nil, fmt.Errorf("%s: privateKeyFile %s: %w", cfg.Path, cfg.PrivateKeyFile, err)
	}
	cipher, err := bhcrypto.ParseCipher(cfg.Cipher)
	if err != nil {
		return nil, fmt.Errorf("%s: cipher: %w", cfg.Path, err)
	}
	id := bhcrypto.NewIdentity(priv, cipher, bhcrypto.Prologue(cfg.Cluster.Name))
	if gw := cfg.LocalGateway(); gw != nil && gw.PublicKey != "" {
		listed, err := bhcrypto.ParsePublicKey(gw.PublicKey)
		// A followed catalog may still list a reimaged gateway's old
		// key: the gateway registers its new one (check warns).
		if err == nil && listed != id.Public && !cfg.Follows() {
			return nil, fmt.Errorf("%s: privateKeyFile %s does not match the publicKey listed for gateway %s (it belongs to %s)",
				cfg.Path, cfg.PrivateKeyFile, cfg.Gateway, id.Public)
		}
	}
	return id, nil
}

// tunnelMTU is the TUN's MTU under cfg, which the MSS clamp follows:
// interface.mtu as written; with "auto" derived from the WAN path
// (autoMTU); with the field left out config.DefaultMTU. A gateway whose
// datagrams can go through a hub (config.CanBeRelayed) gets the relay
// header taken off the last two, so a full-size relayed datagram is no
// larger on the WAN than a direct one; a written number is the
// operator's (check warns when it is too large for relayed paths).
// Called once at start: the TUN's MTU does not follow reloads.
func tunnelMTU(cfg *config.Config, log *slog.Logger) (int, error) {
	m := cfg.Interface.MTU
	switch {
	case m.Auto:
		mtu, err := autoMTU(cfg)
		if err != nil {
			return 0, err
		}
		log.Info("tunnel MTU derived from the WAN path", "mtu", mtu, "relay_header", relayHeader(cfg))
		return mtu, nil
	case m.Default && cfg.CanBeRelayed():
		mtu := config.DefaultMTU - bhcrypto.RelayOverhead
		log.Info("tunnel MTU lowered by the relay header: this gateway has no endpoint, so its datagrams can go through a hub",
			"mtu", mtu, "default", config.DefaultMTU, "relay_header", bhcrypto.RelayOverhead)
		return mtu, nil
	}
	return m.Value, nil
}

// relayHeader is what a relay message adds to cfg's datagrams on the
// WAN: bhcrypto.RelayOverhead when they can go through a hub, else 0.
func relayHeader(cfg *config.Config) int {
	if cfg.CanBeRelayed() {
		return bhcrypto.RelayOverhead
	}
	return 0
}

// autoMTU derives the tunnel MTU from the interface that carries traffic
// to each remote gateway, minus the exact encapsulation overhead for the
// outer address family, and the relay header when cfg's datagrams can go
// through a hub (to one of those gateways). It takes the smallest over
// all remote gateways.
func autoMTU(cfg *config.Config) (int, error) {
	best := 0
	for _, s := range cfg.Sites {
		if s.Name == cfg.Site {
			continue
		}
		for _, g := range s.Gateways {
			ep := g.EndpointAddr.Addr()
			if !ep.IsValid() {
				continue // behind NAT: reached through its own sessions or a hub
			}
			link, err := netsetup.PathMTU(ep)
			if err != nil {
				return 0, fmt.Errorf("%s: interface.mtu auto: route to %s/%s at %s: %w", cfg.Path, s.Name, g.Name, ep, err)
			}
			m := link - Overhead(ep.Is4() || ep.Is4In6()) - relayHeader(cfg)
			if best == 0 || m < best {
				best = m
			}
		}
	}
	if best == 0 {
		return config.DefaultMTU - relayHeader(cfg), nil
	}
	if best < 576 {
		return 0, fmt.Errorf("%s: interface.mtu auto: the WAN path leaves only %d bytes for inner packets", cfg.Path, best)
	}
	return best, nil
}

// Overhead is the bytes bridgehead adds around an inner packet on a
// direct path: outer IP and UDP headers, transport header and tag. A
// datagram relayed through a hub carries bhcrypto.RelayOverhead more
// (tunnelMTU leaves room for it). Padding never pushes a packet past the
// tunnel MTU, so it adds nothing here.
func Overhead(ipv4 bool) int {
	ip := 40
	if ipv4 {
		ip = 20
	}
	return ip + 8 + bhcrypto.TransportOverhead
}

func serveMetrics(addr string, g *gateway, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics listen %s: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g.m.reg, promhttp.HandlerOpts{Registry: g.m.reg}))
	g.healthHandlers(mux)
	g.meshHandlers(mux)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server", "err", err)
		}
	}()
	log.Info("metrics listening", "addr", ln.Addr().String())
	return srv, nil
}

// openTUN opens the TUN with kernel offloads (TSO/USO, GRO) and falls back
// to the portable water backend where the kernel or device lacks them.
func openTUN(name string, mtu int, offload bool, log *slog.Logger) (tun.Device, error) {
	if offload {
		dev, err := tun.OpenOffload(tun.OffloadConfig{Name: name, MTU: mtu}, log)
		if err == nil {
			return dev, nil
		}
		if errors.Is(err, os.ErrPermission) {
			// The portable backend would fail the same way: no
			// fallback, and no warning that suggests one.
			return nil, fmt.Errorf("open TUN %s: %w (needs root or CAP_NET_ADMIN)", name, err)
		}
		log.Warn("TUN offloads unavailable; using the portable backend (one packet per system call)", "interface", name, "err", err)
	} else {
		log.Info("TUN offloads turned off by interface.offload; using the portable backend (one packet per system call)", "interface", name)
	}
	w, werr := tun.OpenWater(tun.WaterConfig{Name: name, MTU: mtu})
	if werr != nil {
		return nil, fmt.Errorf("open TUN %s: %w", name, werr)
	}
	return w, nil
}
