package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/controller/ipam"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// Names the controller writes on Nodes. The node side reads the annotation.
const (
	// LabelSite holds the name of the node's Site.
	LabelSite = v1alpha1.GroupName + "/site"
	// AnnotationPodCIDRs holds the node's bridgehead pod blocks, comma
	// separated, the site's first family first ("10.1.4.0/24,fd00:1::/80").
	AnnotationPodCIDRs = v1alpha1.GroupName + "/pod-cidrs"
	// NodeConditionSite is the Node condition that says why a node has
	// no site (False); it turns True once the node is assigned.
	NodeConditionSite corev1.NodeConditionType = "BridgeheadSite"
	// LeaseName is the coordination.k8s.io Lease the replicas compete for.
	LeaseName = "bridgehead-controller"
	// EventNamespace is where Events about Nodes and Sites go: the API
	// accepts Events about cluster-scoped objects only there.
	EventNamespace = "default"
	// component is the Events' reportingController and the field manager.
	component = "bridgehead-controller"
)

// Resources of bridgehead.io/v1alpha1 the controller reads.
var (
	SitesGVR    = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.SitesResource)
	GatewaysGVR = v1alpha1.SchemeGroupVersion.WithResource(v1alpha1.GatewaysResource)
)

// DefaultAuditInterval is the default time between two audits of the
// Nodes' blocks (Options.AuditInterval, --audit-interval).
const DefaultAuditInterval = time.Minute

// Options configure a Controller. Client, Dynamic, Logger and Registry are
// required.
type Options struct {
	Client   kubernetes.Interface
	Dynamic  dynamic.Interface
	Logger   *slog.Logger
	Registry prometheus.Registerer

	// Namespace holds the Lease and the catalog ConfigMaps (required).
	Namespace string
	// Identity names this replica in the Lease (default: a random name).
	Identity string
	// LeaderElect: compete for the Lease; false runs the workers at once
	// (one replica only).
	LeaderElect                               bool
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// KeepLeaseOnStop leaves the Lease held when Run's context ends (the
	// standby then waits for it to expire, as after a crash). By default
	// it is released once the workers have stopped, so the standby takes
	// over at its next try, within about one (jittered) RetryPeriod.
	KeepLeaseOnStop bool

	// ReleaseGrace is how long a deleted node's blocks stay out of the pool.
	ReleaseGrace time.Duration
	// Workers is the number of node reconcile workers (default 4).
	Workers int
	// StatusInterval is the least time between two status writes of one
	// Site (default 1 s).
	StatusInterval time.Duration
	// CatalogInterval is the least time from the end of one catalog
	// publication to the start of the next, so no catalog object is
	// written more often (default 1 s); the same between two writes of
	// the release shards (one more comes when the lead stops).
	CatalogInterval time.Duration
	// Now is the clock of the allocator's release grace (default
	// Clock.Now, else time.Now).
	Now func() time.Time
	// Clock drives the leader's periodic audit (default the real clock).
	Clock clock.WithTicker
	// AuditInterval is the time between two audits of the Nodes' blocks
	// for double allocations (default DefaultAuditInterval).
	AuditInterval time.Duration
	// AzureRoutes, when set, keeps a site's Azure route table in step
	// with the catalog (azure.go, package azureroutes); nil: off.
	AzureRoutes RouteSyncer
	// AzureRouteInterval is the least time between two syncs of the
	// route table (default DefaultAzureRouteInterval).
	AzureRouteInterval time.Duration
}

// Controller assigns Nodes to Sites and allocates their pod blocks. See
// the package doc. Create it with New, run it with Run.
type Controller struct {
	opts    Options
	clock   clock.WithTicker
	log     *slog.Logger
	client  kubernetes.Interface
	dyn     dynamic.Interface
	metrics *metrics
	alloc   *ipam.Allocator

	nodeFactory informers.SharedInformerFactory
	dynFactory  dynamicinformer.DynamicSharedInformerFactory
	nodes       listersv1.NodeLister
	nodesSynced cache.InformerSynced
	sites       cache.GenericLister
	sitesSynced cache.InformerSynced
	gws         cache.GenericLister
	gwsSynced   cache.InformerSynced

	nodeQueue workqueue.TypedRateLimitingInterface[string]
	siteQueue workqueue.TypedRateLimitingInterface[string]
	// catalogQueue holds catalogKey at most once (see publish.go).
	catalogQueue workqueue.TypedRateLimitingInterface[string]
	// releaseQueue holds releaseQKey at most once (see releases.go); its
	// one worker owns releaseShards, the shards' data as last written or
	// read, by name (restoreReleases sets it before the worker starts, the
	// final flush after it ends).
	releaseQueue  workqueue.TypedRateLimitingInterface[string]
	releaseShards map[string]string
	// releasePace spaces the writes of the shards (the release worker's).
	releasePace pacer

	cmFactory  informers.SharedInformerFactory // catalog ConfigMaps in Namespace
	configMaps listersv1.ConfigMapLister
	cmSynced   cache.InformerSynced

	broadcaster events.EventBroadcaster
	recorder    events.EventRecorder

	ready   atomic.Bool // caches synced
	leading atomic.Bool // workers may run; handlers enqueue
	// stopping is set when Run's context ends (not a lost Lease): the
	// lead may then drain for longer (drainTimeout).
	stopping atomic.Bool
	// sitesDirty is set by Site events that change a spec; the site
	// worker then re-reads every Site (overlaps span sites).
	sitesDirty atomic.Bool
	// finalizerDenied: a Site finalizer write was forbidden (said once).
	finalizerDenied atomic.Bool
	matcher         atomic.Pointer[matcher]

	// mu guards the maps below; workers hold it for map updates only,
	// never across API calls.
	mu           sync.Mutex
	siteModels   map[string]site            // last good model of each Site
	siteProblems map[string]string          // Valid=False message per Site
	assigned     map[string]string          // node -> site
	siteCount    map[string]int             // site -> nodes assigned
	unassigned   map[string]string          // node -> reason (no_site, ambiguous)
	waiting      map[string]map[string]bool // site -> nodes waiting for a block
	reported     map[string]string          // object key -> last problem reported as an Event
	// catalogProblems: Sites the last catalog plan left out, with the
	// problem (their Valid=False message); written by the catalog worker.
	catalogProblems map[string]string

	// catalogMu guards catalogWritten, the catalog objects as this leader
	// last wrote them (the catalog worker writes, informer handlers read).
	catalogMu      sync.Mutex
	catalogWritten map[string]*corev1.ConfigMap
	// catalogPace spaces the publications; catalogPublished is owned by
	// the catalog worker.
	catalogPace      pacer
	catalogPublished bool

	// routeQueue holds routeQKey at most once (azure.go); routePlan is
	// the sites of the last publication that changed the catalog (the
	// catalog worker stores, the route worker loads); routePace spaces
	// the syncs.
	routeQueue workqueue.TypedRateLimitingInterface[string]
	routePlan  atomic.Pointer[config.Config]
	routePace  pacer
}

// New builds a Controller; nothing runs until Run.
func New(o Options) (*Controller, error) {
	if o.Client == nil || o.Dynamic == nil || o.Logger == nil || o.Registry == nil || o.Namespace == "" {
		return nil, errors.New("controller: Client, Dynamic, Logger, Registry and Namespace are required")
	}
	if o.CatalogInterval <= 0 {
		o.CatalogInterval = time.Second
	}
	if o.Workers <= 0 {
		o.Workers = 4
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	} else if o.Now == nil {
		o.Now = o.Clock.Now
	}
	if o.AzureRouteInterval <= 0 {
		o.AzureRouteInterval = DefaultAzureRouteInterval
	}
	if o.AuditInterval <= 0 {
		o.AuditInterval = DefaultAuditInterval
	}
	if o.StatusInterval <= 0 {
		o.StatusInterval = time.Second
	}
	if o.Identity == "" {
		o.Identity = fmt.Sprintf("%s-%d", component, time.Now().UnixNano())
	}
	if o.LeaderElect && (o.LeaseDuration <= 0 || o.RenewDeadline <= 0 || o.RetryPeriod <= 0) {
		return nil, errors.New("controller: leader election needs LeaseDuration, RenewDeadline and RetryPeriod")
	}
	c := &Controller{
		opts:         o,
		clock:        o.Clock,
		log:          o.Logger,
		client:       o.Client,
		dyn:          o.Dynamic,
		metrics:      newMetrics(o.Registry),
		alloc:        ipam.New(ipam.Options{Now: o.Now, Grace: o.ReleaseGrace}),
		siteModels:   map[string]site{},
		siteProblems: map[string]string{},
		assigned:     map[string]string{},
		siteCount:    map[string]int{},
		unassigned:   map[string]string{},
		waiting:      map[string]map[string]bool{},
		reported:     map[string]string{},

		catalogProblems: map[string]string{},
		catalogWritten:  map[string]*corev1.ConfigMap{},
		releaseShards:   map[string]string{},
	}
	c.matcher.Store(newMatcher(nil, nil))
	c.nodeQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bridgehead_nodes"})
	c.siteQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bridgehead_sites"})
	c.catalogQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bridgehead_catalog"})
	c.releaseQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bridgehead_releases"})
	c.routeQueue = workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "bridgehead_azure_routes"})
	o.Registry.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridgehead_controller_queue_depth", Help: "Keys waiting in the node queue.",
			ConstLabels: prometheus.Labels{"queue": "nodes"}}, func() float64 { return float64(c.nodeQueue.Len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "bridgehead_controller_queue_depth", Help: "Keys waiting in the node queue.",
			ConstLabels: prometheus.Labels{"queue": "sites"}}, func() float64 { return float64(c.siteQueue.Len()) }),
	)

	// The caches keep only what the controller reads (handlers.go).
	c.nodeFactory = informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithTransform(transformNode))
	ni := c.nodeFactory.Core().V1().Nodes()
	c.nodes, c.nodesSynced = ni.Lister(), ni.Informer().HasSynced
	if _, err := ni.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.nodeAddedOrDeleted(obj) },
		UpdateFunc: func(old, cur any) { c.nodeUpdated(old, cur) },
		DeleteFunc: func(obj any) { c.nodeAddedOrDeleted(obj) },
	}); err != nil {
		return nil, err
	}
	c.dynFactory = dynamicinformer.NewDynamicSharedInformerFactory(o.Dynamic, 0)
	si := c.dynFactory.ForResource(SitesGVR)
	if err := si.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	c.sites, c.sitesSynced = si.Lister(), si.Informer().HasSynced
	if _, err := si.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.siteChanged(obj) },
		UpdateFunc: func(old, cur any) { c.siteUpdated(old, cur) },
		DeleteFunc: func(obj any) { c.siteChanged(obj) },
	}); err != nil {
		return nil, err
	}
	gi := c.dynFactory.ForResource(GatewaysGVR)
	if err := gi.Informer().SetTransform(stripManagedFields); err != nil {
		return nil, err
	}
	c.gws, c.gwsSynced = gi.Lister(), gi.Informer().HasSynced
	if _, err := gi.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.gatewayChanged(obj) },
		UpdateFunc: func(old, cur any) { c.gatewayUpdated(old, cur) },
		DeleteFunc: func(obj any) { c.gatewayChanged(obj) },
	}); err != nil {
		return nil, err
	}
	c.cmFactory = informers.NewSharedInformerFactoryWithOptions(o.Client, 0, informers.WithNamespace(o.Namespace),
		informers.WithTweakListOptions(func(lo *metav1.ListOptions) { lo.LabelSelector = catalog.CatalogLabel }),
		informers.WithTransform(stripManagedFields))
	ci := c.cmFactory.Core().V1().ConfigMaps()
	c.configMaps, c.cmSynced = ci.Lister(), ci.Informer().HasSynced
	if _, err := ci.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.configMapChanged(obj, false) },
		UpdateFunc: func(_, cur any) { c.configMapChanged(cur, false) },
		DeleteFunc: func(obj any) { c.configMapChanged(obj, true) },
	}); err != nil {
		return nil, err
	}
	c.broadcaster = events.NewBroadcaster(&events.EventSinkImpl{Interface: o.Client.EventsV1()})
	c.recorder = c.broadcaster.NewRecorder(scheme.Scheme, component)
	return c, nil
}

// now is the allocator's clock.
func (c *Controller) now() time.Time {
	if c.opts.Now != nil {
		return c.opts.Now()
	}
	return time.Now()
}

// Ready reports whether the caches have synced (the /readyz answer; a
// standby is ready too).
func (c *Controller) Ready() bool { return c.ready.Load() }

// Leading reports whether this replica runs the workers.
func (c *Controller) Leading() bool { return c.leading.Load() }

// Run starts the informers, waits for their caches, then competes for the
// Lease (or leads at once without leader election) and runs the workers
// while it leads. It returns nil when ctx ends, and an error when the
// lease is lost: a Controller leads at most once.
func (c *Controller) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	if err := c.broadcaster.StartRecordingToSinkWithContext(ctx); err != nil {
		return fmt.Errorf("events: %w", err)
	}
	defer c.broadcaster.Shutdown()
	c.nodeFactory.Start(ctx.Done())
	c.dynFactory.Start(ctx.Done())
	c.cmFactory.Start(ctx.Done())
	defer func() {
		cancel()
		c.nodeFactory.Shutdown()
		c.dynFactory.Shutdown()
		c.cmFactory.Shutdown()
	}()
	start := time.Now()
	if !cache.WaitForCacheSync(ctx.Done(), c.nodesSynced, c.sitesSynced, c.gwsSynced, c.cmSynced) {
		return ctx.Err()
	}
	c.ready.Store(true)
	c.log.Info("caches synced", "took", time.Since(start).Round(time.Millisecond))
	if !c.opts.LeaderElect {
		return c.lead(ctx)
	}
	lock := microLeaseLock{&resourcelock.LeaseLock{
		LeaseMeta:  metavOf(LeaseName, c.opts.Namespace),
		Client:     c.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: c.opts.Identity},
	}}
	// The elector starts OnStartedLeading on a goroutine of its own and
	// does not wait for it; started/closed (under startMu) let Run wait
	// for a lead that began, and stop one that would begin too late.
	var (
		leadErr         error
		startMu         sync.Mutex
		started, closed bool
	)
	led := make(chan struct{})
	// stopLead waits until no lead runs and none can start.
	stopLead := func() {
		startMu.Lock()
		closed = true
		wait := started
		startMu.Unlock()
		if wait {
			<-led
		}
	}
	// The elector runs on electCtx, which ends only after ctx has ended
	// AND the lead's workers have stopped: with ReleaseOnCancel the
	// elector gives the Lease up as soon as its context ends, and a
	// standby that took over while a worker still wrote could hand out a
	// block this leader was patching onto a Node.
	var stopWG sync.WaitGroup
	defer stopWG.Wait() // after cancelElect, deferred below
	electCtx, cancelElect := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelElect()
	stopWG.Go(func() {
		select {
		case <-ctx.Done():
			stopLead()
			cancelElect()
		case <-electCtx.Done():
		}
	})
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock:            lock,
		Name:            LeaseName,
		LeaseDuration:   c.opts.LeaseDuration,
		RenewDeadline:   c.opts.RenewDeadline,
		RetryPeriod:     c.opts.RetryPeriod,
		ReleaseOnCancel: !c.opts.KeepLeaseOnStop,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(lctx context.Context) {
				startMu.Lock()
				if closed {
					startMu.Unlock()
					return
				}
				started = true
				startMu.Unlock()
				defer close(led)
				// The lead ends with the lease (lctx) or the stop (ctx).
				lctx, cancel := context.WithCancel(lctx)
				defer cancel()
				defer context.AfterFunc(ctx, func() { c.stopping.Store(true); cancel() })()
				leadErr = c.lead(lctx)
			},
			OnStoppedLeading: func() { c.log.Info("leadership ended", "identity", c.opts.Identity) },
			OnNewLeader: func(id string) {
				if id != c.opts.Identity {
					c.log.Info("following", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return err
	}
	c.log.Info("competing for the lease", "lease", c.opts.Namespace+"/"+LeaseName, "identity", c.opts.Identity)
	le.Run(electCtx) // its own context for the lead ends when it returns
	stopLead()
	cancelElect()
	if leadErr != nil {
		return leadErr
	}
	if ctx.Err() != nil {
		return nil
	}
	return errors.New("lost the lease")
}

// lead rebuilds the allocation state, runs the workers until ctx ends, and
// stops them.
func (c *Controller) lead(ctx context.Context) error {
	leadStart := time.Now()
	c.log.Info("leading", "identity", c.opts.Identity)
	c.metrics.leader.Set(1)
	defer c.metrics.leader.Set(0)
	c.syncSites()
	// The catalog comes from the caches alone (Nodes carry their blocks),
	// so its worker starts before the rebuild, which lists every Node
	// from the API server: the first catalog does not wait for it.
	published := c.publishedNodes() // before the catalog worker rewrites it
	var wg sync.WaitGroup
	wg.Go(func() { c.work(ctx, c.catalogQueue, "catalog", c.reconcileCatalog) })
	defer func() {
		c.catalogQueue.ShutDown()
		wg.Wait()
	}()
	c.catalogQueue.Add(catalogKey)
	names, err := c.rebuild(ctx, published)
	if err != nil {
		return fmt.Errorf("rebuild: %w", err)
	}
	c.leading.Store(true)
	defer c.leading.Store(false)
	c.catalogQueue.Add(catalogKey) // changes during the rebuild enqueued nothing
	keys := slices.Clone(names)
	if cached, err := c.nodes.List(everything()); err == nil {
		for _, n := range cached {
			keys = append(keys, n.Name)
		}
	}
	// The failover is over when every Node known at the takeover has
	// been reconciled once.
	first := newFirstPass(keys, leadStart, time.Now, func(n int, took time.Duration) {
		c.metrics.firstPass.Set(took.Seconds())
		c.log.Info("first full reconcile done", "nodes", n, "since_leading", took.Round(time.Millisecond))
	})
	for _, n := range keys {
		c.nodeQueue.Add(n)
	}
	reconcileNode := func(ctx context.Context, key string) error {
		err := c.reconcileNode(ctx, key)
		if err == nil {
			first.reconciled(key)
		}
		return err
	}
	for _, s := range c.siteNames() {
		c.siteQueue.Add(s)
	}
	for i := 0; i < c.opts.Workers; i++ {
		wg.Go(func() { c.work(ctx, c.nodeQueue, "node", reconcileNode) })
	}
	wg.Go(func() { c.work(ctx, c.siteQueue, "site", c.reconcileSite) })
	wg.Go(func() { c.work(ctx, c.releaseQueue, "releases", c.reconcileReleases) })
	wg.Go(func() { c.auditLoop(ctx) })
	if c.opts.AzureRoutes != nil {
		wg.Go(func() { c.work(ctx, c.routeQueue, "azure_routes", c.reconcileRoutes) })
	}
	c.releaseQueue.Add(releaseQKey) // drops the graces that ended while no one led
	<-ctx.Done()
	c.nodeQueue.ShutDown()
	c.siteQueue.ShutDown()
	c.catalogQueue.ShutDown()
	c.releaseQueue.ShutDown()
	c.routeQueue.ShutDown()
	wg.Wait()
	// A node deleted just before the stop: its grace is recorded before
	// the Lease goes (the queue drops keys at the stop).
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.drainTimeout())
	defer cancel()
	if err := c.writeReleases(fctx); err != nil {
		c.log.Warn("release graces not recorded at the stop", "err", err)
	}
	return nil
}

// drainTimeout is how long a reconcile in flight when the lead ends may
// go on with its API calls (and the release graces be recorded): 5 s at
// a stop, while this replica still holds the Lease (it releases it only
// after). When the lead ended because the Lease could not be renewed, no
// longer than a standby surely waits before it may take the Lease.
// client-go's renew loop sleeps RetryPeriod after a renewal succeeds and
// then tries for RenewDeadline, so the lead ends at most RetryPeriod +
// RenewDeadline after the last renewal's answer reached this replica; a
// standby takes the Lease only LeaseDuration after its own poll saw that
// renewal (microLeaseLock: it sees every renewal), which is after the API
// server stored it. Hence LeaseDuration - RenewDeadline - RetryPeriod,
// less 1 s for the answer's way back and for a request abandoned at the
// deadline that the server still applies (2 s with the defaults 15 s,
// 10 s and 2 s; 0 when the timings leave no room).
func (c *Controller) drainTimeout() time.Duration {
	d := 5 * time.Second
	if c.opts.LeaderElect && !c.stopping.Load() {
		d = max(0, min(d, c.opts.LeaseDuration-c.opts.RenewDeadline-c.opts.RetryPeriod-time.Second))
	}
	return d
}

// work runs reconciles from q until it shuts down. When ctx ends, the
// reconcile in flight finishes its API calls (for up to drainTimeout)
// rather than abandoning them: a request the client gave up on may still
// be applied by the server, after the Lease was released.
func (c *Controller) work(ctx context.Context, q workqueue.TypedRateLimitingInterface[string], kind string, reconcile func(context.Context, string) error) {
	rctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(c.drainTimeout(), cancel) })()
	for {
		key, shutdown := q.Get()
		if shutdown {
			return
		}
		if ctx.Err() != nil { // stopping: start nothing new
			q.Done(key)
			continue
		}
		start := time.Now()
		err := reconcile(rctx, key)
		c.metrics.reconcileDur.WithLabelValues(kind).Observe(time.Since(start).Seconds())
		if err != nil {
			c.metrics.reconciles.WithLabelValues(kind, "error").Inc()
			if ctx.Err() == nil {
				c.log.Warn("reconcile failed, will retry", "kind", kind, "name", key, "retries", q.NumRequeues(key), "err", err)
				q.AddRateLimited(key)
			}
		} else {
			c.metrics.reconciles.WithLabelValues(kind, "ok").Inc()
			q.Forget(key)
		}
		q.Done(key)
	}
}

func (c *Controller) siteNames() []string {
	objs, err := c.sites.List(everything())
	if err != nil {
		return nil
	}
	var out []string
	for _, o := range objs {
		if n, err := metaName(o); err == nil {
			out = append(out, n)
		}
	}
	return out
}
