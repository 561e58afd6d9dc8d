// Package kubenode is the Kubernetes source of the node agent's model:
// the catalog file (a ConfigMap mount) gives the sites, their gateways and
// the cluster's CIDRs, and the API server gives the nodes — each Node's
// site (label bridgehead.io/site), its InternalIP addresses and the pod
// ranges the controller allocated to it (spec.podCIDRs, or the annotation
// bridgehead.io/pod-cidrs where spec.podCIDRs was already set). The nodes
// of the Node objects replace the catalog's nodes of their site, so the
// model (nodeagent.FromConfig) is the same as in file mode.
//
// Kubernetes types stay here: package nodeagent never sees them. A Node
// informer (client-go) signals Changed on every add, update and delete
// of a Node, and the catalog file is watched as in file mode. When this
// node cannot be configured — no Node object, no site label, no pod
// range — Load fails with the reason and an Event of type Warning is
// recorded on the Node, once per distinct reason. ConditionReporter
// (condition.go) keeps the condition BridgeheadNodeNetwork in the Node's
// status from the agent's Status: what is in place and the last error.
package kubenode

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	listersv1 "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/filewatch"
	"github.com/bridgehead/bridgehead/nodeagent"
)

// The controller's names on Node objects.
const (
	SiteLabel          = "bridgehead.io/site"
	PodCIDRsAnnotation = "bridgehead.io/pod-cidrs"
)

// Event reasons recorded on this node's Node object.
const (
	ReasonNotConfigured = "BridgeheadNodeNotConfigured"
	ReasonConfigured    = "BridgeheadNodeConfigured"
)

// Source builds the node's model from the catalog file and the Node
// objects. Load and Changed are called from the agent's loop; the
// informer's handlers only signal. lastReason is guarded by mu.
type Source struct {
	catalog, node string
	nodes         listersv1.NodeLister
	recorder      record.EventRecorder
	log           *slog.Logger
	changed       chan struct{}

	mu         sync.Mutex
	lastReason string
}

// New starts a Node informer on client and a watcher on the catalog,
// both until ctx ends, and waits for the informer's first list.
// recorder records this node's Events.
func New(ctx context.Context, client kubernetes.Interface, recorder record.EventRecorder, catalog, node string, log *slog.Logger) (*Source, error) {
	s := &Source{catalog: catalog, node: node, recorder: recorder, log: log, changed: make(chan struct{}, 1)}
	f := informers.NewSharedInformerFactory(client, 10*time.Minute)
	inf := f.Core().V1().Nodes()
	if _, err := inf.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.signal() },
		UpdateFunc: func(old, cur any) { s.nodeUpdated(old, cur) },
		DeleteFunc: func(any) { s.signal() },
	}); err != nil {
		return nil, err
	}
	s.nodes = inf.Lister()
	f.Start(ctx.Done())
	go func() { <-ctx.Done(); f.Shutdown() }()
	if !cache.WaitForCacheSync(ctx.Done(), inf.Informer().HasSynced) {
		return nil, errors.New("kubernetes: the Node informer did not sync")
	}
	if _, err := filewatch.Start(ctx, catalog, filewatch.DefaultDebounce, s.changed, log); err != nil {
		log.Warn("catalog changes will not be noticed", "path", catalog, "err", err)
	}
	return s, nil
}

func (s *Source) signal() {
	select {
	case s.changed <- struct{}{}:
	default:
	}
}

// nodeUpdated signals unless only a Node's status heartbeat changed:
// kubelets update every Node every few seconds, and the model reads
// addresses, labels, annotations and spec only.
func (s *Source) nodeUpdated(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if ok1 && ok2 && slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) &&
		o.Labels[SiteLabel] == n.Labels[SiteLabel] &&
		o.Annotations[PodCIDRsAnnotation] == n.Annotations[PodCIDRsAnnotation] &&
		slices.Equal(o.Status.Addresses, n.Status.Addresses) {
		return
	}
	s.signal()
}

// Changed signals when a Node or the catalog changed.
func (s *Source) Changed() <-chan struct{} { return s.changed }

// Load reads the catalog, replaces the nodes of every site that has Node
// objects with them, and builds this node's model.
func (s *Source) Load() (*nodeagent.Desired, error) {
	d, reason, err := s.load()
	s.report(reason, err)
	return d, err
}

func (s *Source) load() (*nodeagent.Desired, string, error) {
	c, err := config.Load(s.catalog)
	if err != nil {
		return nil, "", err
	}
	self, err := s.nodes.Get(s.node)
	if apierrors.IsNotFound(err) {
		return nil, "", fmt.Errorf("kubernetes: no Node %q", s.node)
	}
	if err != nil {
		return nil, "", fmt.Errorf("kubernetes: Node %q: %w", s.node, err)
	}
	site := self.Labels[SiteLabel]
	if site == "" {
		return nil, "NoSite", fmt.Errorf("Node %q has no label %s: the controller has not assigned it a site", s.node, SiteLabel)
	}
	if c.SiteByName(site) == nil {
		return nil, "UnknownSite", fmt.Errorf("Node %q: label %s=%q names no site of the catalog %s", s.node, SiteLabel, site, s.catalog)
	}
	if _, _, err := podCIDRs(self); err != nil {
		return nil, "NoPodCIDR", err
	}
	all, err := s.nodes.List(labels.Everything())
	if err != nil {
		return nil, "", err
	}
	c = withNodes(c, all, s.log)
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); len(problems) > 0 {
		return nil, "CatalogCheck", problems
	}
	d, err := nodeagent.FromConfig(c, s.node)
	if err != nil {
		return nil, "", err
	}
	return d, "", nil
}

// report records an Event on this node's Node when the reason it cannot
// be configured changes, and one when it can be again.
func (s *Source) report(reason string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason == s.lastReason {
		return
	}
	ref := &corev1.ObjectReference{Kind: "Node", Name: s.node, UID: "", APIVersion: "v1"}
	if self, gerr := s.nodes.Get(s.node); gerr == nil {
		ref.UID = self.UID
	}
	switch {
	case reason != "":
		s.recorder.Event(ref, corev1.EventTypeWarning, ReasonNotConfigured, reason+": "+err.Error())
	case err == nil && s.lastReason != "":
		s.recorder.Event(ref, corev1.EventTypeNormal, ReasonConfigured, "the node's pod network and routes are configured")
	}
	s.lastReason = reason
}

// podCIDRs returns a Node's IPv4 and IPv6 pod ranges: spec.podCIDRs, or
// the controller's annotation when spec.podCIDRs is empty.
func podCIDRs(n *corev1.Node) (v4, v6 netip.Prefix, err error) {
	list := n.Spec.PodCIDRs
	if len(list) == 0 && n.Spec.PodCIDR != "" {
		list = []string{n.Spec.PodCIDR}
	}
	if len(list) == 0 {
		if a := n.Annotations[PodCIDRsAnnotation]; a != "" {
			list = strings.Split(a, ",")
		}
	}
	if len(list) == 0 {
		return v4, v6, fmt.Errorf("Node %q has no pod range yet (spec.podCIDRs and annotation %s are empty)", n.Name, PodCIDRsAnnotation)
	}
	for _, s := range list {
		p, perr := netip.ParsePrefix(strings.TrimSpace(s))
		if perr != nil {
			return v4, v6, fmt.Errorf("Node %q: pod range %q: %v", n.Name, s, perr)
		}
		if p.Addr().Is4() && !v4.IsValid() {
			v4 = p.Masked()
		} else if p.Addr().Is6() && !v6.IsValid() {
			v6 = p.Masked()
		}
	}
	return v4, v6, nil
}

// internalIPs returns a Node's first IPv4 and IPv6 InternalIP.
func internalIPs(n *corev1.Node) (v4, v6 netip.Addr) {
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			continue
		}
		if ip.Is4() && !v4.IsValid() {
			v4 = ip
		} else if ip.Is6() && !v6.IsValid() {
			v6 = ip
		}
	}
	return v4, v6
}

// withNodes returns a copy of c whose sites list, for each site with at
// least one labelled Node that has a pod range and an address, exactly
// those nodes (sorted by name). Nodes not usable yet are left out and
// logged at debug level.
func withNodes(c *config.Config, all []*corev1.Node, log *slog.Logger) *config.Config {
	bySite := map[string][]config.Node{}
	for _, n := range all {
		site := n.Labels[SiteLabel]
		if site == "" {
			continue
		}
		p4, p6, err := podCIDRs(n)
		a4, a6 := internalIPs(n)
		if err != nil || (!a4.IsValid() && !a6.IsValid()) {
			log.Debug("node left out of the routes", "node", n.Name, "site", site, "err", err)
			continue
		}
		cn := config.Node{Name: n.Name, PodCIDR: p4}
		if a4.IsValid() {
			cn.Address = a4
		}
		if p6.IsValid() && a6.IsValid() {
			cn.Address6, cn.PodCIDR6 = a6, p6
		}
		bySite[site] = append(bySite[site], cn)
	}
	out := *c
	out.Sites = slices.Clone(c.Sites)
	for i := range out.Sites {
		nodes, ok := bySite[out.Sites[i].Name]
		if !ok {
			continue
		}
		slices.SortFunc(nodes, func(a, b config.Node) int { return strings.Compare(a.Name, b.Name) })
		out.Sites[i].Nodes = nodes
	}
	return &out
}
