package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultRepairInterval is how often the agent checks everything against
// the model when nothing told it to: the backstop for changes the kernel
// does not announce.
const DefaultRepairInterval = 30 * time.Second

// Source yields the node's model. Load is called from the agent's loop
// only: at start and after each signal on Changed.
type Source interface {
	Load() (*Desired, error)
	// Changed signals when Load may return a new model.
	Changed() <-chan struct{}
}

// RouteSetter is what the agent needs of Routes (a fake in unit tests).
type RouteSetter interface {
	Set([]Route) (RouteChange, error)
	List() ([]Route, error)
	Watch(ctx context.Context, changed chan<- struct{}, onErr func(error)) error
}

// SNATEnsurer is what the agent needs of SNAT.
type SNATEnsurer interface {
	Ensure(*Desired) (bool, error)
}

// HostChecker is what the agent needs of HostNet: the host's netfilter
// settings pod traffic depends on.
type HostChecker interface {
	// EnsureBridgeNetfilter loads br_netfilter and sets its sysctls for
	// the model's families; it returns the sysctls it changed.
	EnsureBridgeNetfilter(*Desired) ([]string, error)
	// CheckForward reports a forward chain that drops pod traffic.
	CheckForward(*Desired) error
}

// Options are an Agent's dependencies and settings.
type Options struct {
	Log      *slog.Logger
	Registry prometheus.Registerer
	Routes   RouteSetter
	SNAT     SNATEnsurer
	// Host, when set, is checked at every sync (stages bridge-netfilter
	// and forward); nil skips both.
	Host HostChecker
	// CNIConfDir, CNIBinDir, CNIPluginsFrom: see the Default* constants.
	CNIConfDir, CNIBinDir, CNIPluginsFrom string
	CNI                                   CNIOptions
	// RepairInterval is the period of the full check (default
	// DefaultRepairInterval).
	RepairInterval time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Status, when set, is called from Run's goroutine with the node's
	// Status each time it changes (after a sync, a route repair or a
	// model that failed to load). It must return quickly: kubenode's
	// ConditionReporter hands it to its own goroutine.
	Status func(Status)
	// StateFile is where the agent keeps its host state (state.go;
	// DefaultStateFile in `bridgehead node`); empty keeps none.
	StateFile string
	// Version is the agent's version, recorded in the state file.
	Version string
}

// Agent keeps one node equal to its model. Run owns every field after
// New returns; nothing else reads them.
type Agent struct {
	o Options
	m *metrics
	// cur is the model in force; errs remembers which stages failed last,
	// so a failure is logged when it starts and when it ends, not at
	// every retry.
	cur  *Desired
	errs map[string]string
	// cniWritten and routes are the last sync's results; published is
	// the last Status handed to Options.Status.
	cniWritten bool
	routes     int
	published  *Status
	// plugins remembers the plugin binaries that passed the version check.
	plugins pluginCheck
	// prev is the host state found at start (state.go); adopted is set
	// once the first sync has compared the node with it.
	prev    HostState
	adopted bool
	// held is set while a sync was skipped because a newer agent's
	// state is on the host: the next look syncs in full.
	held bool
}

// New builds an agent and registers its metrics.
func New(o Options) (*Agent, error) {
	if o.Log == nil || o.Registry == nil || o.Routes == nil || o.SNAT == nil {
		return nil, errors.New("nodeagent: Log, Registry, Routes and SNAT are required")
	}
	if o.CNIConfDir == "" {
		o.CNIConfDir = DefaultCNIConfDir
	}
	if o.CNIBinDir == "" {
		o.CNIBinDir = DefaultCNIBinDir
	}
	if o.CNIPluginsFrom == "" {
		o.CNIPluginsFrom = DefaultCNIPluginsFrom
	}
	if o.RepairInterval <= 0 {
		o.RepairInterval = DefaultRepairInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	return &Agent{o: o, m: m, errs: map[string]string{}}, nil
}

// Run loads the model, applies it and keeps applying it until ctx ends:
// after each change of the source, after each notification that one of
// its routes went away, and every RepairInterval. A model that does not
// load is never a reason to stop: at start the agent reports why (log,
// metrics, Status) and tries again at the source's next change and every
// RepairInterval, as a node that has not been assigned a site or a pod
// range yet must wait for the controller; later, the model in force
// stays and the error is logged and counted. Run leaves everything in
// place when it returns: a restart changes nothing.
func (a *Agent) Run(ctx context.Context, src Source) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	routeEvents := make(chan struct{}, 1)
	watching := false
	tick := time.NewTicker(a.o.RepairInterval)
	defer tick.Stop()
	a.readPrev()
	a.load(src)
	for {
		if a.cur != nil && !watching {
			watching = true
			if err := a.o.Routes.Watch(ctx, routeEvents, func(err error) {
				a.o.Log.Warn("route notifications", "err", err)
			}); err != nil {
				a.o.Log.Warn("route notifications unavailable; repairs wait for the periodic check", "err", err, "interval", a.o.RepairInterval)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-src.Changed():
			a.load(src)
		case <-routeEvents:
			if a.held {
				a.sync("start")
				continue
			}
			start := a.o.Now()
			ch := a.syncRoutes()
			if n := ch.Added + ch.Replaced; n > 0 {
				took := a.o.Now().Sub(start)
				a.m.repairSeconds.Observe(took.Seconds())
				a.m.routeRepairs.Add(float64(n))
				a.o.Log.Info("routes repaired", "routes", n, "took", took)
			}
			a.m.syncs.WithLabelValues("route event").Inc()
			a.publish()
		case <-tick.C:
			if a.cur == nil {
				a.load(src)
				continue
			}
			a.sync("periodic")
		}
	}
}

// load reads the source's model and applies it when it is new. Without a
// model in force, the failure says the node waits; with one, that it
// keeps it. Run's goroutine only.
func (a *Agent) load(src Source) {
	nd, err := src.Load()
	if err != nil {
		if a.cur == nil {
			err = fmt.Errorf("%w (the node waits: nothing is configured until its model loads)", err)
		} else {
			err = fmt.Errorf("%w (the node keeps its current routes and config)", err)
		}
		a.fail(stageCatalog, err)
		a.publish()
		return
	}
	a.ok(stageCatalog)
	if reflect.DeepEqual(nd, a.cur) && !a.held {
		a.publish()
		return
	}
	msg := "node model changed"
	trigger := "model changed"
	if a.cur == nil {
		msg, trigger = "node model", "start"
	}
	a.o.Log.Info(msg, "node", nd.Node, "site", nd.Site, "podCIDR", nd.PodCIDR, "podCIDR6", nd.PodCIDR6, "routes", len(nd.Routes))
	a.cur = nd
	a.sync(trigger)
}

// sync applies the whole model; each stage reports its own failure and
// does not stop the others.
// A node whose state file a newer agent wrote is left alone
// (stateKnown).
func (a *Agent) sync(trigger string) {
	if !a.stateKnown() {
		a.held = true
		a.publish()
		return
	}
	if a.held {
		a.held, trigger = false, "start"
	}
	a.m.syncs.WithLabelValues(trigger).Inc()
	cniWrote := a.syncCNI()
	ch := a.syncRoutes()
	if trigger == "periodic" && ch.Added+ch.Replaced > 0 {
		a.m.routeRepairs.Add(float64(ch.Added + ch.Replaced))
	}
	snatWrote := a.syncSNAT()
	a.syncHost()
	a.saveState(ch, cniWrote, snatWrote)
	a.publish()
}

// syncHost sets br_netfilter's sysctls and checks the forward chains;
// each reports as its own stage.
func (a *Agent) syncHost() {
	if a.o.Host == nil {
		return
	}
	changed, err := a.o.Host.EnsureBridgeNetfilter(a.cur)
	if len(changed) > 0 {
		a.m.sysctlWrites.Add(float64(len(changed)))
		a.o.Log.Info("set sysctls", "sysctls", changed)
	}
	if err != nil {
		a.fail(stageBridgeNF, err)
	} else {
		a.ok(stageBridgeNF)
	}
	if err := a.o.Host.CheckForward(a.cur); err != nil {
		a.fail(stageForward, err)
	} else {
		a.ok(stageForward)
	}
}

// syncCNI reports whether it wrote the conflist.
func (a *Agent) syncCNI() bool {
	d := a.cur
	if copied, err := InstallPlugins(a.o.CNIBinDir, a.o.CNIPluginsFrom, CNIPlugins()); len(copied) > 0 || err != nil {
		a.m.pluginsCopied.Add(float64(len(copied)))
		if len(copied) > 0 {
			a.o.Log.Info("installed CNI plugins", "plugins", copied, "into", a.o.CNIBinDir, "from", a.o.CNIPluginsFrom)
		}
		if err != nil {
			a.m.cniWritten.Set(0)
			a.cniWritten = false
			a.fail(stageCNI, err)
			return false
		}
	}
	if err := a.plugins.check(a.o.CNIBinDir, CNIPlugins()); err != nil {
		a.m.cniWritten.Set(0)
		a.cniWritten = false
		a.fail(stageCNI, err)
		return false
	}
	if !a.o.CNI.Coexist {
		if foreign, err := ForeignConfigs(a.o.CNIConfDir); err != nil || len(foreign) > 0 {
			if err == nil {
				err = fmt.Errorf("another CNI's config is in %s (%s): the runtime would take bridgehead's %s, which sorts first, and bridgehead would undo that CNI's changes at every sync; remove it, or run with --cni-coexist",
					a.o.CNIConfDir, strings.Join(foreign, ", "), CNIConfName)
			}
			a.m.cniWritten.Set(0)
			a.cniWritten = false
			a.fail(stageCNI, err)
			return false
		}
	}
	data, err := Conflist(d, a.o.CNI)
	var changed bool
	if err == nil {
		if changed, err = WriteConflist(a.o.CNIConfDir, data); changed {
			a.m.cniWrites.Inc()
			a.o.Log.Info("wrote CNI config", "dir", a.o.CNIConfDir, "file", CNIConfName, "ranges", d.PodCIDRs())
		}
	}
	if err != nil {
		a.m.cniWritten.Set(0)
		a.cniWritten = false
		a.fail(stageCNI, err)
		return false
	}
	a.m.cniWritten.Set(1)
	a.cniWritten = true
	a.ok(stageCNI)
	return changed
}

func (a *Agent) syncRoutes() RouteChange {
	ch, err := a.o.Routes.Set(a.cur.Routes)
	a.m.routeChanges.WithLabelValues("add").Add(float64(ch.Added))
	a.m.routeChanges.WithLabelValues("replace").Add(float64(ch.Replaced))
	a.m.routeChanges.WithLabelValues("delete").Add(float64(ch.Deleted))
	if ch.Changed() {
		a.o.Log.Info("routes changed", "added", ch.Added, "replaced", ch.Replaced, "deleted", ch.Deleted)
	}
	if have, lerr := a.o.Routes.List(); lerr == nil {
		a.m.routesInstalled.Set(float64(len(have)))
		a.routes = len(have)
	} else if err == nil {
		err = lerr
	}
	if err != nil {
		a.fail(stageRoutes, err)
	} else {
		a.ok(stageRoutes)
	}
	return ch
}

// syncSNAT reports whether it wrote the table.
func (a *Agent) syncSNAT() bool {
	wrote, err := a.o.SNAT.Ensure(a.cur)
	if wrote {
		a.m.snatWrites.Inc()
		a.o.Log.Info("wrote SNAT table", "table", "inet "+SNATTable, "pods", a.cur.PodCIDRs(), "clusterCIDRs", len(a.cur.ClusterCIDRs))
	}
	if err != nil {
		a.fail(stageSNAT, err)
		return wrote
	}
	a.ok(stageSNAT)
	return wrote
}

// fail records a failed stage; the log line comes when the error is new.
func (a *Agent) fail(stage string, err error) {
	a.m.errors.WithLabelValues(stage).Inc()
	a.m.lastError.WithLabelValues(stage).Set(1)
	a.m.lastErrorTime.Set(float64(a.o.Now().UnixNano()) / 1e9)
	if a.errs[stage] != err.Error() {
		a.o.Log.Error("node sync failed", "stage", stage, "err", err)
		a.errs[stage] = err.Error()
	}
}

// ok records a successful stage, logging the recovery from a failure.
func (a *Agent) ok(stage string) {
	a.m.lastError.WithLabelValues(stage).Set(0)
	if _, failed := a.errs[stage]; failed {
		a.o.Log.Info("node sync recovered", "stage", stage)
		delete(a.errs, stage)
	}
}
