package daemon

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/kube/meshstatus"
	"github.com/bridgehead/bridgehead/mesh"
	"github.com/bridgehead/bridgehead/router"
)

// The mesh view of a gateway (package mesh): its rows toward every
// remote site, served on the metrics port as /mesh (the heat-map page)
// and /mesh.json, and in Kubernetes mode published in its Gateway's
// status and merged with every other Gateway's rows.

const (
	// meshSampleEvery is how often the tracker samples the router's
	// counters (RTT medians and loss windows) and the publisher looks
	// whether its rows are due.
	meshSampleEvery = time.Second
	// meshClusterTTL is how long the cluster's rows read from the
	// Gateways serve page requests before they are listed again: many
	// open pages cost one list call per TTL, not one per refresh.
	meshClusterTTL = 10 * time.Second
)

// meshView owns the gateway's mesh tracker, the publisher of its rows
// (nil without a kubernetes section) and the cache of the cluster's rows.
// run's goroutine samples and publishes; handlers, from any goroutine,
// read the router's current state through the tracker (safe for
// concurrent use) and the cache under mu.
type meshView struct {
	peers   func() []health.PeerState
	cfg     func() *config.Config
	tracker *mesh.Tracker
	pub     *meshstatus.Publisher
	client  dynamic.Interface
	log     *slog.Logger

	mu          sync.Mutex // guards the cache
	clusterRows []mesh.Row
	clusterSrcs []mesh.Source
	clusterAt   time.Time
}

// newMeshView makes g's mesh view; client is the kubernetes section's
// client (nil: file mode, the gateway serves its own rows only). The
// publisher's metric goes on g's registry.
func newMeshView(g *gateway, client dynamic.Interface, log *slog.Logger) (*meshView, error) {
	cfg := g.cfg.Load()
	v := &meshView{peers: g.peerStates, cfg: g.cfg.Load, client: client, log: log,
		tracker: mesh.NewTracker(mesh.TrackerOptions{Site: cfg.Site, Gateway: cfg.Gateway, Every: meshSampleEvery,
			ActiveWindow: router.ActiveWindow, IdleFactor: router.IdleProbeFactor})}
	if client != nil && cfg.Kubernetes != nil {
		pub, err := meshstatus.New(meshstatus.Options{Client: client, Gateway: cfg.Kubernetes.Gateway, Log: log, Registry: g.m.reg})
		if err != nil {
			return nil, err
		}
		v.pub = pub
	}
	g.m.reg.MustRegister(newMeshCollector(func() []mesh.Row { return v.tracker.Rows(meshPeers(v.peers()), time.Now()) }))
	return v, nil
}

// run samples the router every meshSampleEvery and publishes the rows
// when due, until ctx ends; it returns the function that stops it and
// waits. A write is bounded by registerTimeout, so a slow API server
// delays the next sample, never forwarding.
func (v *meshView) run(ctx context.Context) (stop func()) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(meshSampleEvery)
		defer t.Stop()
		for {
			now := time.Now()
			peers := meshPeers(v.peers())
			v.tracker.Observe(peers, now)
			if v.pub != nil {
				wctx, wcancel := context.WithTimeout(ctx, registerTimeout)
				_ = v.pub.Step(wctx, v.tracker.RouterRows(peers, now), now) // logged by the publisher; retried next tick
				wcancel()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() { cancel(); <-done }
}

// matrix is the mesh as this gateway knows it now: its own rows, live,
// and in Kubernetes mode (unless local) every other Gateway's published
// rows.
func (v *meshView) matrix(ctx context.Context, local bool) mesh.Matrix {
	now := time.Now()
	cfg := v.cfg()
	rows := v.tracker.Rows(meshPeers(v.peers()), now)
	srcs := []mesh.Source{{Name: "gateway " + cfg.Site + "/" + cfg.Gateway + " (live)", Rows: len(rows)}}
	if v.client != nil && !local {
		cr, cs := v.cluster(ctx, now)
		rows = append(rows, cr...)
		srcs = append(srcs, cs...)
	}
	return mesh.Merge(rows, srcs, now, mesh.DefaultRefresh)
}

// cluster returns every Gateway's rows, listed at most every
// meshClusterTTL; a failed list is a source with its error.
func (v *meshView) cluster(ctx context.Context, now time.Time) ([]mesh.Row, []mesh.Source) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.clusterAt.IsZero() || now.Sub(v.clusterAt) >= meshClusterTTL {
		lctx, cancel := context.WithTimeout(ctx, registerTimeout)
		rows, srcs, err := meshstatus.List(lctx, v.client)
		cancel()
		if err != nil {
			srcs = []mesh.Source{{Name: "Kubernetes API", Error: err.Error()}}
		}
		v.clusterRows, v.clusterSrcs, v.clusterAt = rows, srcs, now
	}
	return v.clusterRows, v.clusterSrcs
}

// meshHandlers serves /mesh (the page) and /mesh.json (the matrix; the
// page fetches it). ?local=1 leaves the other Gateways' rows out.
func (g *gateway) meshHandlers(mux *http.ServeMux) {
	v := g.mesh
	if v == nil {
		return // tests that build a gateway without one
	}
	mux.HandleFunc("/mesh.json", func(w http.ResponseWriter, r *http.Request) {
		m := v.matrix(r.Context(), r.URL.Query().Get("local") != "")
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		json.NewEncoder(w).Encode(m)
	})
	mux.HandleFunc("/mesh", func(w http.ResponseWriter, r *http.Request) {
		m := v.matrix(r.Context(), r.URL.Query().Get("local") != "")
		cfg := v.cfg()
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		// The page loads nothing from elsewhere; its own script and
		// style are inline.
		w.Header().Set("Content-Security-Policy", "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src 'none'")
		if err := mesh.WritePage(w, m, cfg.Site+"/"+cfg.Gateway); err != nil {
			v.log.Debug("writing the mesh page", "err", err)
		}
	})
}

// meshPeers converts the router's view of the remote gateways.
func meshPeers(ps []health.PeerState) []mesh.Peer {
	out := make([]mesh.Peer, 0, len(ps))
	for _, p := range ps {
		mp := mesh.Peer{Site: p.Site, Gateway: p.Gateway, Path: mesh.Direct, Via: p.Via,
			Interval: p.Live.ProbeInterval, RTT: p.Live.ProbeRTT,
			ProbesSent: p.Live.ProbesSent, ProbeReplies: p.Live.ProbeReplies, TxPackets: p.TxPackets,
			PathMTU: p.Live.PathMTU, MTUDegraded: p.Live.MTUDegraded, LastAnswer: p.Live.LastAck}
		switch p.Live.State {
		case router.LiveUp:
			mp.State = mesh.Up
		case router.LiveDown:
			mp.State, mp.Reason = mesh.Down, p.Live.Reason.String()
		default:
			mp.State = mesh.Connecting
		}
		if p.Path == health.PathHub {
			mp.Path = mesh.Hub
		}
		out = append(out, mp)
	}
	return out
}
