package netpol

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

// Writer is where a Controller puts its rulesets: a *Table.
type Writer interface {
	Write(*Ruleset) error
	// Current is the fingerprint of what the table holds ("" for
	// nothing of ours).
	Current() (string, error)
}

// CounterReader is a Writer that can read back the table's named
// counters (packets by name): *Table. The Controller exports them as
// bridgehead_netpol_verdicts_total.
type CounterReader interface {
	Counters() (map[string]uint64, error)
}

// Defaults of Options.
const (
	DefaultRepairInterval = 5 * time.Minute
	// DefaultDebounce bounds the compiles under a constant churn of
	// pods to four a second (36 ms of CPU each at 10,000 pods: a
	// seventh of a core at most), and keeps a new policy's or pod's
	// rules within some 0.5 s of the API.
	DefaultDebounce = 250 * time.Millisecond
)

// Options are a Controller's dependencies.
type Options struct {
	// Client lists and watches pods, namespaces and networkpolicies of
	// every namespace.
	Client kubernetes.Interface
	// Node is this node's name (spec.nodeName of its pods).
	Node   string
	Writer Writer
	Log    *slog.Logger
	// Registry takes the bridgehead_netpol_* metrics (default: a
	// private one).
	Registry prometheus.Registerer
	// RepairInterval: the table's fingerprint is checked this often,
	// and the table rewritten when it is not the one last written
	// (deleted, or replaced). Default DefaultRepairInterval.
	RepairInterval time.Duration
	// Debounce gathers the changes of a burst into one compile.
	// Default DefaultDebounce.
	Debounce time.Duration
	// ProcSys is where the br_netfilter sysctls are read (default
	// /proc/sys).
	ProcSys string
	// OnEnforcing, when set, is called once, from Run's goroutine, when
	// the first table compiled from the synced view is written: the
	// node agent advertises it in its Node condition, which
	// `bridgehead verify --collect` reads.
	OnEnforcing func()
}

// Controller keeps the table equal to the compiled policy set:
// level-triggered (every change recompiles the whole set from the
// informers' stores), written only when the fingerprint changes.
type Controller struct {
	o       Options
	log     *slog.Logger
	m       *metrics
	changed chan struct{}
	factory informers.SharedInformerFactory
	pods    cache.SharedIndexInformer
	nss     cache.SharedIndexInformer
	pols    cache.SharedIndexInformer
	last    string // fingerprint last written; Run's goroutine's
	v       *verdicts
	// bridgeOK: the last checkBridge's finding, per family; Run's.
	bridgeOK map[string]bool
	// announced: the table was first seen enforcing (enforced: the gauge
	// set, OnEnforcing called); Run's.
	announced bool
}

// New builds a Controller; Run starts it.
func New(o Options) (*Controller, error) {
	switch {
	case o.Client == nil || o.Writer == nil || o.Log == nil:
		return nil, errors.New("netpol: Client, Writer and Log are required")
	case o.Node == "":
		return nil, errors.New("netpol: Node is required")
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.RepairInterval <= 0 {
		o.RepairInterval = DefaultRepairInterval
	}
	if o.Debounce <= 0 {
		o.Debounce = DefaultDebounce
	}
	if o.ProcSys == "" {
		o.ProcSys = "/proc/sys"
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	c := &Controller{o: o, log: o.Log, m: m, changed: make(chan struct{}, 1)}
	if cr, ok := o.Writer.(CounterReader); ok {
		c.v = &verdicts{read: cr, log: o.Log, names: map[string]verdictKey{}, base: map[verdictKey]uint64{}}
		if err := o.Registry.Register(c.v); err != nil {
			return nil, err
		}
	}
	c.factory = informers.NewSharedInformerFactory(o.Client, 0)
	c.pods = c.factory.Core().V1().Pods().Informer()
	c.nss = c.factory.Core().V1().Namespaces().Informer()
	c.pols = c.factory.Networking().V1().NetworkPolicies().Informer()
	for inf, tf := range map[cache.SharedIndexInformer]cache.TransformFunc{c.pods: StripPod, c.nss: StripNamespace, c.pols: StripPolicy} {
		if err := inf.SetTransform(tf); err != nil {
			return nil, err
		}
	}
	for _, inf := range []cache.SharedIndexInformer{c.pods, c.nss, c.pols} {
		if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { c.signal() },
			UpdateFunc: func(old, cur any) { c.updated(old, cur) },
			DeleteFunc: func(any) { c.signal() },
		}); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Controller) signal() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// updated signals a change the compiler reads. The transforms keep only
// what it reads, so the objects differ in their resourceVersion alone
// when a pod's status changed in something else (conditions, restarts):
// those updates, most of a cluster's, cost no compile.
func (c *Controller) updated(old, cur any) {
	o, ok1 := old.(metav1.Object)
	n, ok2 := cur.(metav1.Object)
	if ok1 && ok2 && sameButVersion(old, cur, o, n) {
		return
	}
	c.signal()
}

func sameButVersion(old, cur any, o, n metav1.Object) bool {
	switch op := old.(type) {
	case *Pod:
		np, ok := cur.(*Pod)
		return ok && samePod(op, np)
	case *corev1.Namespace:
		return maps.Equal(o.GetLabels(), n.GetLabels())
	}
	return o.GetGeneration() != 0 && o.GetGeneration() == n.GetGeneration()
}

// StripNamespace keeps a namespace's name and labels.
func StripNamespace(obj any) (any, error) {
	n, ok := obj.(*corev1.Namespace)
	if !ok {
		return obj, nil
	}
	return &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion, Labels: n.Labels}}, nil
}

// StripPolicy drops a policy's managed fields and annotations (a
// kubectl-applied policy carries itself again in one).
func StripPolicy(obj any) (any, error) {
	p, ok := obj.(*networkingv1.NetworkPolicy)
	if !ok {
		return obj, nil
	}
	return &networkingv1.NetworkPolicy{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion, Generation: p.Generation},
		Spec:       p.Spec,
	}, nil
}

// Run watches until ctx ends. Until the informers have synced it writes
// nothing: a restarted agent leaves the table it wrote before in place
// (pods stay isolated), and never writes a ruleset from a partial view.
func (c *Controller) Run(ctx context.Context) error {
	c.factory.Start(ctx.Done())
	defer c.factory.Shutdown()
	c.log.Info("network policy: waiting for pods, namespaces and policies", "node", c.o.Node)
	start := time.Now()
	if !c.waitSynced(ctx) {
		return nil
	}
	c.log.Info("network policy: informers synced", "pods", len(c.pods.GetStore().ListKeys()),
		"namespaces", len(c.nss.GetStore().ListKeys()), "policies", len(c.pols.GetStore().ListKeys()), "took", time.Since(start).Round(time.Millisecond))
	if fp, err := c.o.Writer.Current(); err == nil {
		c.last = fp
	}
	c.checkBridge()
	repair := time.NewTicker(c.o.RepairInterval)
	defer repair.Stop()
	retry := time.NewTimer(0) // the first sync
	defer retry.Stop()
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-c.changed:
			// Gather the rest of the burst.
			select {
			case <-time.After(c.o.Debounce):
			case <-ctx.Done():
				return nil
			}
		case <-repair.C:
			c.checkBridge()
			if fp, err := c.o.Writer.Current(); err != nil || fp != c.last {
				if err == nil {
					c.log.Warn("network policy: the table is not the one written last: rewriting it", "table", "inet "+TableName, "found", fp)
					c.m.repairs.Inc()
				}
				c.last = ""
			}
		case <-retry.C:
		}
		if err := c.sync(); err != nil {
			c.log.Error("network policy: table not written", "err", err, "retry", backoff)
			retry.Reset(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		backoff = time.Second
	}
}

// waitSynced waits for the informers, and says every minute what it
// still waits for: a list refused for want of RBAC shows only in
// client-go's own log otherwise. False when ctx ended first.
func (c *Controller) waitSynced(ctx context.Context) bool {
	tick := time.NewTicker(time.Minute)
	defer tick.Stop()
	poll := time.NewTicker(100 * time.Millisecond)
	defer poll.Stop()
	for {
		var waiting []string
		for name, inf := range map[string]cache.SharedIndexInformer{"pods": c.pods, "namespaces": c.nss, "networkpolicies": c.pols} {
			if !inf.HasSynced() {
				waiting = append(waiting, name)
			}
		}
		if len(waiting) == 0 {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-tick.C:
			slices.Sort(waiting)
			c.log.Warn("network policy: not enforced yet: still waiting to list and watch; the node agent's ServiceAccount needs list and watch on them cluster-wide",
				"waiting", strings.Join(waiting, ","))
		case <-poll.C:
		}
	}
}

// checkBridge reads br_netfilter's sysctls: without them, packets
// between two pods on this node's bridge are bridged past the forward
// hook, and no policy applies to them. The agent sets them
// (nodeagent.HostNet); this says so, once per change, when they are
// not, and keeps bridgehead_netpol_bridge_netfilter.
func (c *Controller) checkBridge() {
	if c.bridgeOK == nil {
		c.bridgeOK = map[string]bool{}
	}
	for fam, name := range map[string]string{"ipv4": "bridge-nf-call-iptables", "ipv6": "bridge-nf-call-ip6tables"} {
		b, err := os.ReadFile(filepath.Join(c.o.ProcSys, "net", "bridge", name))
		ok := err == nil && strings.TrimSpace(string(b)) == "1"
		if was, seen := c.bridgeOK[fam]; (!seen || was) && !ok {
			why := "net.bridge." + name + " is not 1"
			if errors.Is(err, os.ErrNotExist) {
				why = "br_netfilter is not loaded"
			}
			c.log.Warn("network policy: not enforced between pods of this node's bridge", "family", fam, "why", why)
		} else if seen && !was && ok {
			c.log.Info("network policy: enforced between pods of this node's bridge again", "family", fam)
		}
		c.bridgeOK[fam] = ok
		v := 0.0
		if ok {
			v = 1
		}
		c.m.bridge.WithLabelValues(fam).Set(v)
	}
}

// enforced records that the table holds a ruleset compiled from the
// synced view, written now or found in place: the gauge, and OnEnforcing
// once. Run's goroutine only.
func (c *Controller) enforced() {
	c.m.enforcing.Set(1)
	if c.announced {
		return
	}
	c.announced = true
	if c.o.OnEnforcing != nil {
		c.o.OnEnforcing()
	}
}

// sync compiles the stores' view and writes it when it differs from
// what was written last.
func (c *Controller) sync() error {
	t0 := time.Now()
	in := Input{Node: c.o.Node}
	for _, o := range c.pods.GetStore().List() {
		if p, ok := o.(*Pod); ok {
			in.Pods = append(in.Pods, p)
		}
	}
	for _, o := range c.nss.GetStore().List() {
		in.Namespaces = append(in.Namespaces, o.(*corev1.Namespace))
	}
	for _, o := range c.pols.GetStore().List() {
		in.Policies = append(in.Policies, o.(*networkingv1.NetworkPolicy))
	}
	rs := Compile(in)
	fp := Fingerprint(rs)
	compiled := time.Since(t0)
	c.m.seconds.WithLabelValues("compile").Observe(compiled.Seconds())
	c.m.setStats(rs.Stats)
	if fp == c.last {
		c.m.syncs.WithLabelValues("unchanged").Inc()
		if c.v != nil {
			// The table a previous run wrote: learn its counters.
			c.v.mu.Lock()
			if len(c.v.names) == 0 {
				c.v.adopt(rs)
			}
			c.v.mu.Unlock()
		}
		// The table in place holds this ruleset (a restarted agent finds
		// what its previous run wrote): it enforces as if written now.
		if !c.announced {
			c.log.Info("network policy: the table in place holds the synced ruleset; kept", "table", "inet "+TableName, "fingerprint", fp)
		}
		c.enforced()
		return nil
	}
	t1 := time.Now()
	if c.v != nil {
		c.v.mu.Lock()
		defer c.v.mu.Unlock()
		c.v.fold()
	}
	if err := c.o.Writer.Write(rs); err != nil {
		c.m.syncs.WithLabelValues("error").Inc()
		return err
	}
	if c.v != nil {
		c.v.adopt(rs)
	}
	written := time.Since(t1)
	c.m.seconds.WithLabelValues("write").Observe(written.Seconds())
	c.m.syncs.WithLabelValues("written").Inc()
	c.m.lastWrite.SetToCurrentTime()
	c.last = fp
	c.enforced()
	s := rs.Stats
	c.log.Info("network policy: table written", "table", "inet "+TableName, "fingerprint", fp,
		"policies", s.Policies, "localPolicies", s.LocalPolicies, "invalid", s.Invalid, "pods", s.Pods, "localPods", s.LocalPods,
		"chains", s.Chains, "rules", s.Rules, "sets", s.Sets, "elements", s.Elements, "dispatch", s.Dispatch,
		"compile", compiled.Round(time.Microsecond), "write", written.Round(time.Microsecond))
	return nil
}

// metrics are the bridgehead_netpol_* series.
type metrics struct {
	syncs     *prometheus.CounterVec
	seconds   *prometheus.HistogramVec
	objects   *prometheus.GaugeVec
	enforcing prometheus.Gauge
	lastWrite prometheus.Gauge
	repairs   prometheus.Counter
	bridge    *prometheus.GaugeVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_netpol_syncs_total", Help: "Compiles of the policy set, by result: written (the table was replaced), unchanged, error (the write failed).",
		}, []string{"result"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "bridgehead_netpol_sync_seconds", Help: "Time to compile the policy set, and to write the table (one nftables transaction).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 9),
		}, []string{"stage"}),
		objects: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bridgehead_netpol_ruleset", Help: "Size of the compiled policy set: policies, local_policies, invalid_policies, pods, local_pods, chains, rules, sets, elements, dispatch.",
		}, []string{"kind"}),
		enforcing: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_netpol_enforcing", Help: "1 once the table holds a ruleset compiled from the synced API view.",
		}),
		lastWrite: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_netpol_last_write_timestamp_seconds", Help: "When the table was last written.",
		}),
		repairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_netpol_repairs_total", Help: "Rewrites of a table someone else deleted or replaced.",
		}),
		bridge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bridgehead_netpol_bridge_netfilter", Help: "1 when br_netfilter passes bridged packets of the family through the forward hook (net.bridge.bridge-nf-call-ip(6)tables=1): without it, policies do not apply between pods of one node.",
		}, []string{"family"}),
	}
	promreg.Zero(m.syncs, "written", "unchanged", "error")
	if err := promreg.Register(reg, m.syncs, m.seconds, m.objects, m.enforcing, m.lastWrite, m.repairs, m.bridge); err != nil {
		return nil, err
	}
	return m, nil
}

func (m *metrics) setStats(s Stats) {
	for k, v := range map[string]int{
		"policies": s.Policies, "local_policies": s.LocalPolicies, "invalid_policies": s.Invalid,
		"pods": s.Pods, "local_pods": s.LocalPods, "chains": s.Chains, "rules": s.Rules,
		"sets": s.Sets, "elements": s.Elements, "dispatch": s.Dispatch,
	} {
		m.objects.WithLabelValues(k).Set(float64(v))
	}
}

// verdicts exports the table's named counters as
// bridgehead_netpol_verdicts_total{direction, verdict, policy}: the
// packets each policy allowed, and the packets dropped because a pod is
// isolated by the policies named (comma-separated) and none of them
// allowed them. Only packets that reach the policies are counted: the
// first packets of new connections (established ones are accepted
// before). A write replaces the counters with new ones at zero, so the
// values are folded into base, by labels, just before each write;
// packets counted between that read and the write are lost. Series of
// deleted policies stay until the agent restarts.
type verdicts struct {
	read CounterReader
	log  *slog.Logger

	mu    sync.Mutex
	names map[string]verdictKey // the table's counters' labels
	base  map[verdictKey]uint64 // counted by tables written before
}

type verdictKey struct{ dir, verdict, policy string }

var verdictsDesc = prometheus.NewDesc("bridgehead_netpol_verdicts_total",
	"Packets decided by a network policy rule (the first packets of new connections): allowed by a policy, or dropped because the pod is isolated by the policies named and none allowed them.",
	[]string{"direction", "verdict", "policy"}, nil)

func (v *verdicts) Describe(ch chan<- *prometheus.Desc) { ch <- verdictsDesc }

func (v *verdicts) Collect(ch chan<- prometheus.Metric) {
	v.mu.Lock()
	defer v.mu.Unlock()
	sum := maps.Clone(v.base)
	cur, err := v.read.Counters()
	if err != nil {
		v.log.Debug("network policy: counters not read", "err", err)
	}
	for name, n := range cur {
		if k, ok := v.names[name]; ok {
			sum[k] += n
		}
	}
	for k, n := range sum {
		ch <- prometheus.MustNewConstMetric(verdictsDesc, prometheus.CounterValue, float64(n), k.dir, k.verdict, k.policy)
	}
}

// fold adds the table's counters to base, before a write replaces
// them. v.mu is held.
func (v *verdicts) fold() {
	cur, err := v.read.Counters()
	if err != nil {
		v.log.Warn("network policy: counters not read before the write: their packets since the last scrape are lost", "err", err)
		return
	}
	for name, n := range cur {
		if k, ok := v.names[name]; ok {
			v.base[k] += n
		}
	}
}

// adopt learns the labels of the counters rs's table holds. v.mu is
// held.
func (v *verdicts) adopt(rs *Ruleset) {
	clear(v.names)
	for _, c := range rs.Counters {
		verdict := "allowed"
		if c.Verdict == Drop {
			verdict = "dropped"
		}
		k := verdictKey{dir: c.Dir.String(), verdict: verdict, policy: strings.Join(c.Policies, ",")}
		v.names[c.Name] = k
		if _, ok := v.base[k]; !ok {
			v.base[k] = 0
		}
	}
}
