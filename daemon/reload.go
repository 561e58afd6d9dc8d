package daemon

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/transit"
)

// kernel is the OS side a gateway reconciles on every config: routes,
// link settings, forwarding. *netsetup.Setup implements it.
type kernel interface {
	Apply(netsetup.Want) error
	Close() error
}

// gateway is a running gateway's state that reloads change.
//
// Reloads are serialized by mu. The running config is published through an
// atomic pointer so status readers never block a reload.
type gateway struct {
	log       *slog.Logger
	r         *router.Router
	kern      kernel
	m         *metrics
	id        *bhcrypto.Identity
	mtu       int
	checkOpts config.CheckOptions

	version string
	started time.Time
	loaded  atomic.Int64 // unix nanoseconds the running config was loaded

	mu  sync.Mutex
	cfg atomic.Pointer[config.Config]
	// keyDigest is the key files the running keys came from (keys.go):
	// under mu.
	keyDigest [32]byte
	// rotation is the last key rotation, its previous key kept after the
	// overlap, for the Gateway status (keys.go). Written under mu, read
	// by any goroutine.
	rotation atomic.Pointer[bhcrypto.KeyRing]
	// relay is the CONNECT relay, nil when off. Reloads (under mu) start,
	// move and stop it; status reads it from any goroutine.
	relay atomic.Pointer[relay.Relay]
	// transit is the relay path (hub and spoke) under the router; its
	// plan follows reloads. nil in tests that use no relay path.
	transit *transit.Relay
	// paths tells the path to each remote gateway (the relay path's
	// Bind); nil in tests that use no relay path (all direct). Set
	// before the gateway is shared, read-only after.
	paths pathFinder
	// lan watches whether the gateway can deliver to its own site; its
	// zero value (tests) reports that it can.
	lan lanWatch
	// draining is set once the gateway drains before it stops
	// (drain.go): readiness is off from then on. Any goroutine.
	draining atomic.Bool
	// mesh is the gateway's mesh view (mesh.go); set before the metrics
	// server starts, read-only after.
	mesh *meshView
}

// errNeedsRestart marks a change a reload cannot apply.
var errNeedsRestart = errors.New("needs a restart")

// reload loads path and, if it is valid and differs from the running
// config, applies it: all or nothing for the data path (one atomic swap in
// the router), then the kernel routes are reconciled. A file that fails
// leaves the running config untouched. If only the kernel routes fail,
// the file's config is running and the log says so. Every problem is
// logged and the error is returned.
func (g *gateway) reload(path, why string) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	running, err := g.apply(path, why)
	// A large catalog's parse leaves tens of MB of garbage (100 MB of RSS
	// at 20k prefixes); give it back now rather than whenever the
	// scavenger gets to it. Reloads are rare: the forced GC is cheap.
	debug.FreeOSMemory()
	if err == nil {
		return nil
	}
	g.m.reloads.WithLabelValues("error").Inc()
	if running {
		g.log.Error("config reload: the file's config is running, but some kernel routes failed; the next reload or route repair retries them",
			"config", path, "trigger", why, "hash", g.cfg.Load().Hash(), "err", err)
	} else {
		g.log.Error("config reload refused; the running config stays in force",
			"config", path, "trigger", why, "hash", g.cfg.Load().Hash(), "err", err)
	}
	return err
}

// repairRoutes re-applies the running config's kernel state. Called under
// g.mu, on reloads of an unchanged file and every routeRepairInterval.
func (g *gateway) repairRoutes() error {
	if err := g.kern.Apply(kernelState(g.cfg.Load(), g.mtu)); err != nil {
		g.log.Error("kernel routes of the running config could not all be restored", "err", err)
		return fmt.Errorf("kernel routes: %w", err)
	}
	return nil
}

// routeRepairInterval is how often the daemon checks that the kernel still
// has the running config's routes when it cannot watch route notifications.
const routeRepairInterval = 30 * time.Second

// routeBackstopInterval is how often it checks them all while it watches
// route and link notifications (netsetup.Setup.WatchRoutes puts back each
// deleted route at once, and everything when the TUN goes down): for
// whatever still goes unseen.
const routeBackstopInterval = 10 * time.Minute

// apply does the work of reload. running reports whether the file's
// config is the running one when apply returns (unchanged, or applied),
// so that an error is one of the kernel routes alone.
func (g *gateway) apply(path, why string) (running bool, err error) {
	old := g.cfg.Load()
	data, err := config.ReadFile(path)
	if err != nil {
		return false, err
	}
	// The raw bytes' hash first: parsing and checking a catalog of
	// 100k prefixes costs seconds of CPU, a hash milliseconds. A config
	// that follows a catalog (kubernetes.follow) hashes with its catalog
	// file: a change of either is a reload.
	if old.HashWith(data) == old.Hash() {
		if err := g.reloadKeys(old); err != nil { // new key files (keys.go)
			return true, err
		}
		g.log.Debug("config unchanged", "config", path, "trigger", why)
		if why == triggerWatch {
			// Nothing to do: the periodic repair keeps the routes.
			return true, nil
		}
		// Still make the kernel match: routes can vanish under us (the
		// TUN taken down and up flushes them), and a reload is how an
		// operator asks for them back. Apply touches only what is
		// missing.
		return true, g.repairRoutes()
	}
	// The same validation as at start (validate): a file start-up
	// refuses, a reload refuses with the same error.
	v, err := validate(path, data, g.checkOpts, &runningConfig{cfg: old, ring: g.r.KeyRing()}, time.Now(), g.log)
	if err != nil {
		return false, err
	}
	next := v.cfg
	// A relay turned on or moved listens before anything changes, so a
	// taken address refuses the whole reload.
	moved := relayListen(old) != relayListen(next)
	var started *relay.Relay
	if moved && next.Relay != nil {
		if started, err = startRelay(next, g.m.reg, g.log); err != nil {
			return false, fmt.Errorf("%s: %w", next.Path, err)
		}
	}
	// The plan goes first: the router's new pseudo endpoints name
	// gateways by their ids in it.
	if g.transit != nil {
		g.transit.SetPlan(v.plan, v.self)
	}
	if err := g.r.SetConfig(v.router); err != nil {
		if started != nil {
			started.Close()
		}
		if g.transit != nil {
			if plan, self, err := transitPlan(old); err == nil {
				g.transit.SetPlan(plan, self)
			}
		}
		return false, fmt.Errorf("%s: %w", next.Path, err)
	}
	if moved {
		if prev := g.relay.Swap(started); prev != nil {
			prev.Close() // and its connections
			g.log.Info("relay stopped", "addr", relayListen(old))
		}
	} else if rl := g.relay.Load(); rl != nil {
		// Connections to sites the new plan drops are closed.
		if err := rl.SetConfig(*v.relay); err != nil {
			g.log.Error("relay kept its previous policy", "err", err)
		}
	}
	if err := g.applyKeyRing(next, v.ring); err != nil {
		g.log.Error("gateway key not rotated", "config", next.Path, "err", err)
	}
	g.keyDigest = keyFileDigest(next)
	g.cfg.Store(next)
	g.loaded.Store(time.Now().UnixNano())
	g.m.configInfo.Reset()
	g.m.configInfo.WithLabelValues(next.Path, next.Hash()).Set(1)
	if kerr := g.kern.Apply(kernelState(next, g.mtu)); kerr != nil {
		// The data path runs the new config; the kernel is partly
		// behind. reload says so; the next reload retries the routes.
		return true, fmt.Errorf("kernel routes: %w", kerr)
	}
	g.m.reloads.WithLabelValues("success").Inc()
	g.m.lastReload.SetToCurrentTime()
	added, removed := diffSites(old, next)
	g.log.Info("config reloaded", "config", path, "trigger", why, "hash", next.Hash(),
		"sites_added", added, "sites_removed", removed, "peers", len(g.r.Peers()))
	return true, nil
}

// restartOnly refuses changes to what a running gateway cannot change:
// its identity, socket, TUN and the handshake parameters every session
// depends on. Its key can change: a rotation (keys.go).
func restartOnly(old, next *config.Config) error {
	var errs []error
	same := func(field, a, b string) {
		if a != b {
			errs = append(errs, fmt.Errorf("%s: %s changed from %q to %q: %w", next.Path, field, a, b, errNeedsRestart))
		}
	}
	same("site", old.Site, next.Site)
	same("gateway", old.Gateway, next.Gateway)
	same("listen", old.ListenAddr.String(), next.ListenAddr.String())
	same("cipher", old.Cipher, next.Cipher)
	same("interface.name", old.Interface.Name, next.Interface.Name)
	same("interface.mtu", old.Interface.MTU.String(), next.Interface.MTU.String())
	same("interface.offload", fmt.Sprint(old.OffloadEnabled()), fmt.Sprint(next.OffloadEnabled()))
	same("earlyDrop", fmt.Sprint(old.EarlyDropEnabled()), fmt.Sprint(next.EarlyDropEnabled()))
	same("codel", fmt.Sprint(old.CoDel), fmt.Sprint(next.CoDel))
	same("lanes", laneString(old.Lanes), laneString(next.Lanes))
	same("express", fmt.Sprint(old.ExpressEnabled()), fmt.Sprint(next.ExpressEnabled()))
	same("expressPriority", fmt.Sprint(old.ExpressPriorityOrDefault()), fmt.Sprint(next.ExpressPriorityOrDefault()))
	same("cluster.name", old.Cluster.Name, next.Cluster.Name)
	same("metrics.listen", old.Metrics.Listen, next.Metrics.Listen)
	same("controlSocket", old.ControlSocket, next.ControlSocket)
	same("kubernetes", kubeString(old), kubeString(next))
	// A new private key is a rotation, not a restart (keys.go).
	return errors.Join(errs...)
}

// diffSites names the sites a reload adds and removes.
func diffSites(old, next *config.Config) (added, removed []string) {
	names := func(c *config.Config) []string {
		var n []string
		for _, s := range c.Sites {
			n = append(n, s.Name)
		}
		return n
	}
	o, n := names(old), names(next)
	for _, s := range n {
		if !slices.Contains(o, s) {
			added = append(added, s)
		}
	}
	for _, s := range o {
		if !slices.Contains(n, s) {
			removed = append(removed, s)
		}
	}
	return added, removed
}

// ReloadDebounce is how long the config watcher waits after the last
// change to the config file before reloading, so an editor's burst of
// writes and renames becomes one reload.
const ReloadDebounce = filewatch.DefaultDebounce

// triggerWatch is the reload trigger of the watcher. A watcher reload of
// an unchanged file does nothing at all (a SIGHUP one repairs routes).
const triggerWatch = "file changed"

// kubeString is the kubernetes section for restartOnly: it is read at
// start (startRegister).
func kubeString(c *config.Config) string {
	if c.Kubernetes == nil {
		return "off"
	}
	cred := "kubeconfig " + c.KubeconfigPath()
	if c.Kubernetes.InCluster {
		cred = "in-cluster"
	}
	s := fmt.Sprintf("%s, gateway %s", cred, c.Kubernetes.Gateway)
	if c.Follows() {
		s += fmt.Sprintf(", follow namespace %s into %s", c.Kubernetes.Namespace, c.CatalogPath())
	}
	return s
}

// laneString is a config's lanes as restartOnly names it: the number, or
// what 0 means.
func laneString(n int) string {
	if n == 0 {
		return "one per CPU"
	}
	return fmt.Sprint(n)
}
