package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/sdnotify"
)

// readiness evaluates every remote site from the router's liveness state:
// a site is reachable while one of its gateways is up. A gateway that
// cannot deliver to its own site (lanWatch) is not ready, whatever it
// reaches.
func (g *gateway) readiness(now time.Time) health.Report {
	cfg := g.cfg.Load()
	sites := make([]string, 0, len(cfg.Sites))
	for _, s := range cfg.Sites {
		sites = append(sites, s.Name)
	}
	rep := health.Evaluate(cfg.Site, sites, health.PeerStates(g.r.Peers()), now)
	if p := g.lan.Problem(); p != "" {
		rep.Ready, rep.LAN = false, p
	}
	if g.draining.Load() {
		rep.Ready, rep.Draining = false, true
	}
	return rep
}

// peerStates is the router's view of every remote gateway with the path
// to it.
func (g *gateway) peerStates() []health.PeerState {
	return withPaths(health.PeerStates(g.r.Peers()), g.paths)
}

// status is the control socket's view of the gateway. Safe from any
// goroutine: it reads the published config and the router's atomics.
func (g *gateway) status() control.Status {
	now := time.Now()
	cfg := g.cfg.Load()
	rep := g.readiness(now)
	st := control.Status{
		Version: g.version, Site: cfg.Site, Gateway: cfg.Gateway,
		ConfigPath: cfg.Path, ConfigHash: cfg.Hash(),
		ConfigLoaded: time.Unix(0, g.loaded.Load()), Started: g.started,
		Ready: rep.Ready, AllSites: rep.AllSites, Sites: rep.Sites, LAN: rep.LAN,
		Peers: g.peerStates(),
		Drops: control.Drops(g.r.Drops()),
	}
	if rl := g.relay.Load(); rl != nil {
		rs := rl.Status()
		st.Relay = &rs
	}
	return st
}

// updateReadiness publishes readiness to the metrics and to systemd.
func (g *gateway) updateReadiness(now time.Time, n *sdnotify.Notifier) {
	rep := g.readiness(now)
	up := 0
	shown := make(map[string]bool, len(rep.Sites))
	for _, s := range rep.Sites {
		v := 0.0
		if s.Ready {
			v, up = 1, up+1
		}
		g.m.siteReady.WithLabelValues(s.Site).Set(v)
		shown[s.Site] = true
	}
	// Only the sites that left the catalog lose their series: a Reset
	// here left a window in which a scrape saw no bridgehead_site_up.
	for site := range g.m.sitesShown {
		if !shown[site] {
			g.m.siteReady.DeleteLabelValues(site)
		}
	}
	g.m.sitesShown = shown
	if rep.Ready {
		g.m.readyGauge.Set(1)
	} else {
		g.m.readyGauge.Set(0)
	}
	st := fmt.Sprintf("%d/%d remote sites up", up, len(rep.Sites))
	if rep.Draining {
		st = "draining; " + st
	}
	n.Status(st)
}

// opsLoop refreshes readiness and feeds the systemd watchdog while the
// router's loops make progress: a wedged data path stops the pings and
// systemd restarts the service.
func (g *gateway) opsLoop(ctx context.Context, n *sdnotify.Notifier) {
	interval := 2 * time.Second
	if wd := n.WatchdogInterval(); wd > 0 && wd < interval {
		interval = wd
	}
	t := time.NewTicker(interval)
	defer t.Stop()
	g.updateReadiness(time.Now(), n) // the series exist from the start, not after the first tick
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			g.updateReadiness(now, n)
			if err := g.r.Healthy(now); err != nil {
				g.log.Error("data path wedged; withholding the watchdog ping", "err", err)
				continue
			}
			n.Watchdog()
		}
	}
}

// healthHandlers serves /healthz (loops alive) and /readyz (at least one
// remote site reachable, so a load balancer drains a gateway cut off from
// every site; the JSON body names the sites that are not reachable;
// 503 with "draining": true from the start of a drain, drain.go).
func (g *gateway) healthHandlers(mux *http.ServeMux) {
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		if err := g.r.Healthy(time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		rep := g.readiness(time.Now())
		w.Header().Set("Content-Type", "application/json")
		if !rep.Ready {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		json.NewEncoder(w).Encode(rep)
	})
}

// controlSocket is where the control socket goes for cfg.
func controlSocket(cfg *config.Config) string {
	if cfg.ControlSocket != "" {
		return cfg.ControlSocket
	}
	return control.DefaultSocket
}
