package kubenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/kube/follow"
	"github.com/bridgehead/bridgehead/nodeagent"
)

// SiteLabel is the controller's label of a Node's site.
const SiteLabel = "bridgehead.io/site"

// Event reasons recorded on this node's Node object.
const (
	ReasonNotConfigured = "BridgeheadNodeNotConfigured"
	ReasonConfigured    = "BridgeheadNodeConfigured"
)

// Why a node is not configured yet: the first word of the Warning Event.
const (
	whyNoCatalog    = "NoCatalog"    // no catalog file yet (first start, API server not reached)
	whyBadCatalog   = "BadCatalog"   // the config or catalog file does not load
	whyNoNode       = "NoNode"       // no Node object of this name
	whyNoSite       = "NoSite"       // the controller has not labelled the Node yet
	whyNotPublished = "NotPublished" // the catalog does not list the node (no pod range yet)
	whySiteMoved    = "SiteMoved"    // the Node's label names another site than the one followed
)

// Options are a Source's dependencies.
type Options struct {
	// Client reads this node's Node and the catalog's ConfigMaps (get,
	// list, watch), and must not have a short overall timeout.
	Client kubernetes.Interface
	// Node is this node's name.
	Node string
	// Namespace holds the catalog's ConfigMaps (the controller's).
	Namespace string
	// Catalog is the catalog file the follower keeps on the host: what
	// the node's model is built from, and what it starts from when the
	// API server is away.
	Catalog string
	// ServiceCIDRs are the cluster's Service ranges: pod traffic to them
	// keeps its source address (optional: kube-proxy has translated a
	// ClusterIP before the SNAT rule sees it).
	ServiceCIDRs []netip.Prefix
	Recorder     record.EventRecorder
	Log          *slog.Logger
	Registry     prometheus.Registerer
	// Clock is the follower's clock (default the real one).
	Clock clock.Clock
	// Skipped, when set, receives the summary of the catalog entries
	// Load skipped (nodeagent.Skipped) whenever it changes, "" once there
	// are none: ConditionReporter.ReportSkipped, which puts it in the
	// Node condition's message. Called from Load's goroutine.
	Skipped func(summary string)
}

// Source builds the node's model from the catalog file it follows. Load and Changed are called from the agent's
// loop; informer handlers and the follower only signal changed. The
// follower is started by the node informer's handler once the Node has
// a site (started, site guarded by mu); lastReason is Load's goroutine's.
type Source struct {
	o       Options
	log     *slog.Logger
	changed chan struct{}
	node    cache.SharedIndexInformer
	ctx     context.Context
	// wg counts the informer's and the follower's goroutines (Wait).
	wg sync.WaitGroup

	mu      sync.Mutex
	started bool
	site    string  // the site followed
	moved   string  // the Node's label when it names another site
	label   *string // the Node's site label as last seen; nil before the first

	lastReason string
	// skipped is the last summary of skipped entries (Load's goroutine).
	skipped string
	metrics *metrics
}

// New starts watching the node's Node object and the catalog file, until
// ctx ends. It does not wait for the API server: a
// node restarted while the API server is away loads its last catalog at
// once. The catalog follower starts when the Node has a site label.
func New(ctx context.Context, o Options) (*Source, error) {
	switch {
	case o.Client == nil || o.Recorder == nil || o.Log == nil:
		return nil, errors.New("kubenode: Client, Recorder and Log are required")
	case o.Node == "" || o.Namespace == "" || o.Catalog == "":
		return nil, errors.New("kubenode: Node, Namespace and Catalog are required")
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if err := os.MkdirAll(filepath.Dir(o.Catalog), 0o755); err != nil {
		return nil, fmt.Errorf("kubenode: the catalog's directory: %w", err)
	}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	s := &Source{o: o, log: o.Log, changed: make(chan struct{}, 1), ctx: ctx, metrics: m}
	s.node = cache.NewSharedIndexInformer(nodeListWatch(o.Client, o.Node), &corev1.Node{}, 10*time.Minute, cache.Indexers{})
	if err := s.node.SetTransform(transformNode); err != nil {
		return nil, err
	}
	if _, err := s.node.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.nodeChanged(obj) },
		UpdateFunc: func(_, obj any) { s.nodeChanged(obj) },
		DeleteFunc: func(any) { s.signal() },
	}); err != nil {
		return nil, err
	}
	s.wg.Go(func() { s.node.RunWithContext(ctx) })
	if _, err := filewatch.Start(ctx, o.Catalog, filewatch.DefaultDebounce, s.changed, o.Log); err != nil {
		o.Log.Warn("catalog changes will not be noticed", "path", o.Catalog, "err", err)
	}
	return s, nil
}

// transformNode is the Node informer's transform: the agent reads its
// own Node's name, UID and site label only, so the cache keeps its
// name, UID, resourceVersion and labels, not the kubelet's status
// (images, nodeInfo, conditions) or managedFields. It builds a new Node
// (the decoded one is not modified) and passes anything else unchanged.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	return &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID,
		ResourceVersion: n.ResourceVersion, Labels: n.Labels}}, nil
}

// nodeListWatch lists and watches one Node by name: the agent's own,
// never the cluster's.
func nodeListWatch(c kubernetes.Interface, name string) cache.ListerWatcher {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	return cache.ToListWatcherWithWatchListSemantics(&cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) {
			lo.FieldSelector = sel
			return c.CoreV1().Nodes().List(ctx, lo)
		},
		WatchFuncWithContext: func(ctx context.Context, lo metav1.ListOptions) (watch.Interface, error) {
			lo.FieldSelector = sel
			return c.CoreV1().Nodes().Watch(ctx, lo)
		},
	}, c)
}

func (s *Source) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// nodeChanged starts the follower for the Node's site the first time it
// has one, and notes a label that names another site later. It signals
// only when the label changed: kubelets rewrite their Node's status all
// the time, and the model reads nothing else of it.
func (s *Source) nodeChanged(obj any) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return
	}
	site := n.Labels[SiteLabel]
	s.mu.Lock()
	if s.label != nil && *s.label == site {
		// Status heartbeats and the like: the model reads only the label.
		s.mu.Unlock()
		return
	}
	s.label = &site
	start := site != "" && !s.started
	if start {
		s.started, s.site = true, site
	}
	if s.started && site != s.site {
		s.moved = site
	} else {
		s.moved = ""
	}
	s.mu.Unlock()
	if start {
		if err := s.follow(site); err != nil {
			s.log.Error("catalog follower not started", "site", site, "err", err)
		}
	}
	s.signal()
}

// follow starts the follower of site's catalog into the catalog file.
func (s *Source) follow(site string) error {
	f, err := follow.New(follow.Options{
		Client:    s.o.Client,
		Namespace: s.o.Namespace,
		Site:      site,
		Path:      s.o.Catalog,
		Validate:  s.validate,
		Changed:   s.signal,
		Log:       s.log,
		Registry:  s.o.Registry,
		Clock:     s.o.Clock,
	})
	if err != nil {
		return err
	}
	s.log.Info("following the catalog", "site", site, "namespace", s.o.Namespace, "file", s.o.Catalog)
	s.wg.Go(func() { f.Run(s.ctx) })
	return nil
}

// Wait returns once the goroutines New and the follower started have
// ended, after New's ctx ended.
func (s *Source) Wait() { s.wg.Wait() }

// validate checks a candidate catalog as Load will read it: the
// follower writes no catalog that Load would refuse, so the file on the
// host stays the last good one.
func (s *Source) validate(catalog []byte) error {
	_, _, err := s.parse(catalog)
	return err
}

// parse reads a catalog with the cluster's service CIDRs and checks what
// this node installs from it (nodeagent.CheckCatalog): the catalog
// without the entries skipped, which skipped lists.
func (s *Source) parse(data []byte) (*config.Config, config.ErrorList, error) {
	c, err := config.ParseSites(s.o.Catalog, data)
	if err != nil {
		return nil, nil, err
	}
	c.Cluster.ServiceCIDRs = s.o.ServiceCIDRs
	return nodeagent.CheckCatalog(c, s.o.Node)
}

// noteSkipped counts, logs and reports the entries of the catalog Load
// took that it skipped: a log line and a report each time the set
// changes, not at every Load.
func (s *Source) noteSkipped(skipped config.ErrorList) {
	s.metrics.skipped.Set(float64(len(skipped)))
	sum := nodeagent.Skipped(skipped)
	if sum == s.skipped {
		return
	}
	s.skipped = sum
	if sum != "" {
		s.log.Warn("catalog entries skipped: they concern only other nodes or sites", "file", s.o.Catalog, "count", len(skipped), "problems", nodeagent.LogSkipped(skipped))
	} else {
		s.log.Info("catalog entries no longer skipped: the catalog is clean", "file", s.o.Catalog)
	}
	if s.o.Skipped != nil {
		s.o.Skipped(sum)
	}
}

// Changed signals when the Node or the catalog changed.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Load reads the catalog file and builds this node's model. While the Node informer has not synced (the API server is away)
// the catalog file alone decides: a restarted node comes back on it.
func (s *Source) Load() (*nodeagent.Desired, error) {
	d, reason, err := s.load()
	s.report(reason, err)
	return d, err
}

func (s *Source) load() (*nodeagent.Desired, string, error) {
	var self *corev1.Node
	if s.node.HasSynced() {
		obj, ok, _ := s.node.GetStore().GetByKey(s.o.Node)
		if !ok {
			return nil, whyNoNode, fmt.Errorf("kubernetes: no Node %q", s.o.Node)
		}
		self = obj.(*corev1.Node)
		if self.Labels[SiteLabel] == "" {
			return nil, whyNoSite, fmt.Errorf("Node %q has no label %s: the controller has not assigned it a site (is its InternalIP in a Site's nodeCIDRs?)", s.o.Node, SiteLabel)
		}
	}
	s.mu.Lock()
	moved, site := s.moved, s.site
	s.mu.Unlock()
	if moved != "" {
		return nil, whySiteMoved, fmt.Errorf("Node %q: label %s=%q, but the agent follows site %q: restart the agent", s.o.Node, SiteLabel, moved, site)
	}
	data, err := os.ReadFile(s.o.Catalog)
	if errors.Is(err, os.ErrNotExist) {
		return nil, whyNoCatalog, fmt.Errorf("no catalog in %s yet: waiting for the controller's catalog from the API server", s.o.Catalog)
	}
	if err != nil {
		return nil, whyBadCatalog, err
	}
	c, skipped, err := s.parse(data)
	if err != nil {
		return nil, whyBadCatalog, err
	}
	s.noteSkipped(skipped)
	d, err := nodeagent.FromConfig(c, s.o.Node)
	if errors.Is(err, nodeagent.ErrNodeNotFound) {
		where := "the catalog"
		if self != nil {
			where = fmt.Sprintf("site %q of the catalog", self.Labels[SiteLabel])
		}
		return nil, whyNotPublished, fmt.Errorf("Node %q is not in %s yet: the controller publishes a node once it has its pod range", s.o.Node, where)
	}
	if err != nil {
		return nil, whyBadCatalog, err
	}
	if self != nil && d.Site != self.Labels[SiteLabel] {
		return nil, whySiteMoved, fmt.Errorf("Node %q: label %s=%q, but the catalog lists it in site %q", s.o.Node, SiteLabel, self.Labels[SiteLabel], d.Site)
	}
	return d, "", nil
}

// report records an Event on this node's Node when the reason it cannot
// be configured changes, and one when it can be again.
func (s *Source) report(reason string, err error) {
	if reason == s.lastReason {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: s.o.Node, APIVersion: "v1"}
	if obj, ok, _ := s.node.GetStore().GetByKey(s.o.Node); ok {
		ref.UID = obj.(*corev1.Node).UID
	}
	switch {
	case reason != "":
		s.o.Recorder.Event(ref, corev1.EventTypeWarning, ReasonNotConfigured, reason+": "+err.Error())
	case err == nil && s.lastReason != "":
		s.o.Recorder.Event(ref, corev1.EventTypeNormal, ReasonConfigured, "the node's pod network and routes are configured")
	}
	s.lastReason = reason
}
