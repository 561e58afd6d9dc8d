package controller

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// catalogWatch watches the catalog ConfigMaps as a gateway would, and
// records when each object was written (every add or update event).
type catalogWatch struct {
	store  cache.Store
	mu     sync.Mutex
	writes map[string][]time.Time
	ch     chan struct{} // closed and replaced on every change
}

func watchCatalog(t *testing.T, cs kubernetes.Interface) *catalogWatch {
	w := &catalogWatch{writes: map[string][]time.Time{}, ch: make(chan struct{})}
	ctx, cancel := context.WithCancel(context.Background())
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(testNS),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.LabelSelector = catalog.CatalogLabel }))
	inf := f.Core().V1().ConfigMaps().Informer()
	seen := func(obj any) {
		now := time.Now()
		w.mu.Lock()
		defer w.mu.Unlock()
		if cm, ok := obj.(*corev1.ConfigMap); ok {
			w.writes[cm.Name] = append(w.writes[cm.Name], now)
		}
		close(w.ch)
		w.ch = make(chan struct{})
	}
	inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    seen,
		UpdateFunc: func(_, obj any) { seen(obj) },
		DeleteFunc: func(any) { seen(nil) },
	})
	w.store = inf.GetStore()
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	t.Cleanup(func() { cancel(); f.Shutdown() })
	return w
}

// assemble reads the catalog as site's gateway does.
func (w *catalogWatch) assemble(site string) ([]config.Site, error) {
	var base *corev1.ConfigMap
	sl := map[string]*corev1.ConfigMap{}
	for _, obj := range w.store.List() {
		cm := obj.(*corev1.ConfigMap)
		if cm.Name == catalog.BaseName {
			base = cm
		}
		sl[cm.Name] = cm
	}
	return catalog.Assemble(base, sl, site)
}

// waitFor waits until cond holds on the catalog, re-checking on every
// change of a catalog object.
func (w *catalogWatch) waitFor(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	waitChanged(t, &w.mu, &w.ch, timeout, what, cond)
}

// minGap is the shortest time between two writes of one object, and the
// object; the number of writes in all.
func (w *catalogWatch) minGap() (time.Duration, string, int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	gap, obj, n := time.Duration(1<<62), "", 0
	for name, ts := range w.writes {
		n += len(ts)
		for i := 1; i < len(ts); i++ {
			if d := ts[i].Sub(ts[i-1]); d < gap {
				gap, obj = d, name
			}
		}
	}
	return gap, obj, n
}

// siteNodes returns the nodes of site in site's own view of the catalog,
// nil when the catalog is incomplete or lacks the site.
func (w *catalogWatch) siteNodes(site string) []config.Node {
	sites, err := w.assemble(site)
	if err != nil {
		return nil
	}
	for _, s := range sites {
		if s.Name == site {
			return s.Nodes
		}
	}
	return nil
}

func (w *catalogWatch) siteNames() []string {
	sites, _, err := catalog.DecodeBase(w.base())
	if err != nil {
		return nil
	}
	var out []string
	for _, s := range sites {
		out = append(out, s.Name)
	}
	return out
}

func (w *catalogWatch) base() *corev1.ConfigMap {
	obj, ok, _ := w.store.GetByKey(testNS + "/" + catalog.BaseName)
	if !ok {
		return nil
	}
	return obj.(*corev1.ConfigMap)
}

func (h *kubeHarness) createGateway(t *testing.T, site, name, addr, endpoint string) {
	t.Helper()
	g := testGateway(site, name, addr, endpoint, testKey(site+"/"+name))
	g.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Gateway"}
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.dyn.Resource(GatewaysGVR).Create(context.Background(), &unstructured.Unstructured{Object: u}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create gateway %s: %v", g.Name, err)
	}
}

func hasNode(nodes []config.Node, name string) (config.Node, bool) {
	for _, n := range nodes {
		if n.Name == name {
			return n, true
		}
	}
	return config.Node{}, false
}

// TestKubeCatalog: a joining node appears in its site's slice (and only
// there), a deleted one leaves it; a Site that fails the checks is left
// out with Valid=False naming the object and field, and comes back once
// fixed.
func TestKubeCatalog(t *testing.T) {
	h := startKube(t)
	h.createSite(t, "site-a", []string{"10.10.0.0/16"}, []string{"10.100.0.0/16"}, 24, 64)
	h.createSite(t, "site-b", []string{"10.20.0.0/16", "fd20::/64"}, []string{"10.200.0.0/16", "fd99:b::/56"}, 24, 64)
	h.createGateway(t, "site-a", "gw1", "10.10.0.1", "192.0.2.1:51820")
	h.createGateway(t, "site-b", "gw1", "10.20.0.1", "gw-b.example.net:51820")
	w := watchCatalog(t, h.cs)
	in := h.start(t, "bhc-cat", nil)
	waitLeader(t, h, in, 30*time.Second)
	w.waitFor(t, 15*time.Second, "a catalog with both sites", func() bool { return slices.Equal(w.siteNames(), []string{"site-a", "site-b"}) })

	// Joins after a quiet second (a publication within the last second
	// delays the next by the rest of it).
	ctx := context.Background()
	var lat []time.Duration
	for i := range 5 {
		time.Sleep(1100 * time.Millisecond)
		name := fmt.Sprintf("bhc-cat-j%d", i)
		t0 := time.Now()
		if err := h.createNode(ctx, name, fmt.Sprintf("10.20.2.%d", i+1)); err != nil { // IPv4 only in a dual-stack site
			t.Fatal(err)
		}
		w.waitFor(t, 10*time.Second, name+" in site-b's catalog", func() bool { _, ok := hasNode(w.siteNodes("site-b"), name); return ok })
		lat = append(lat, time.Since(t0))
	}
	t.Logf("join: Node created -> in its site's published slice (seen by a watch), 5 joins: p50 %s max %s",
		percentile(lat, 0.5).Round(time.Millisecond), percentile(lat, 1).Round(time.Millisecond))
	if err := h.createNode(ctx, "bhc-cat-b1", "10.20.1.1", "fd20::11"); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, 10*time.Second, "bhc-cat-b1 in site-b's catalog", func() bool { _, ok := hasNode(w.siteNodes("site-b"), "bhc-cat-b1"); return ok })
	cn, _ := hasNode(w.siteNodes("site-b"), "bhc-cat-b1")
	n := h.obs.node("bhc-cat-b1")
	if n == nil || cn.Address.String() != "10.20.1.1" || cn.Address6.String() != "fd20::11" ||
		cn.PodCIDR.String()+","+cn.PodCIDR6.String() != n.Annotations[AnnotationPodCIDRs] {
		t.Fatalf("catalog entry %+v, node annotation %q", cn, n.Annotations[AnnotationPodCIDRs])
	}
	if nodes := w.siteNodes("site-a"); len(nodes) != 0 {
		t.Fatalf("site-a's view holds nodes: %+v", nodes)
	}
	if cm, _, _ := w.store.GetByKey(testNS + "/" + catalog.SliceName("site-b", 0)); cm == nil || cm.(*corev1.ConfigMap).Labels[catalog.SiteLabel] != "site-b" {
		t.Fatalf("slice %v", cm)
	}

	for _, name := range []string{"bhc-cat-b1", "bhc-cat-j0", "bhc-cat-j1", "bhc-cat-j2", "bhc-cat-j3", "bhc-cat-j4"} {
		if err := h.cs.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	w.waitFor(t, 10*time.Second, "site-b's nodes gone from the catalog and its slice deleted", func() bool {
		_, there, _ := w.store.GetByKey(testNS + "/" + catalog.SliceName("site-b", 0))
		sites, err := w.assemble("site-b")
		return err == nil && len(sites) == 2 && !there
	})

	// A bad Site: its gateway's address is outside its node CIDRs.
	h.createSite(t, "site-c", []string{"10.30.0.0/16"}, []string{"10.230.0.0/16"}, 24, 64)
	h.createGateway(t, "site-c", "gw1", "10.31.0.1", "192.0.2.3:51820")
	if err := h.createNode(ctx, "bhc-cat-c1", "10.30.1.1"); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "site-c Valid=False", func() bool {
		s := h.obs.site("site-c")
		return s != nil && meta.IsStatusConditionFalse(s.Status.Conditions, v1alpha1.ConditionValid)
	})
	msg := meta.FindStatusCondition(h.obs.site("site-c").Status.Conditions, v1alpha1.ConditionValid).Message
	t.Logf("site-c: Valid=False: %s", msg)
	if !strings.Contains(msg, "Gateway site-c.gw1: spec.address") || !strings.Contains(msg, "not inside the nodeCIDRs") {
		t.Errorf("Valid message names no object and field: %s", msg)
	}
	h.waitEvent(t, "Site", "site-c", "Invalid")
	if names := w.siteNames(); !slices.Equal(names, []string{"site-a", "site-b"}) {
		t.Fatalf("catalog sites %v with site-c invalid", names)
	}
	if _, err := w.assemble("site-c"); !errors.Is(err, catalog.ErrUnknownSite) {
		t.Fatalf("site-c's view: %v, want ErrUnknownSite", err)
	}
	if !allocated(h.obs.node("bhc-cat-c1")) {
		h.obs.waitFor(t, 10*time.Second, "bhc-cat-c1 allocated", func() bool { return allocated(h.obs.node("bhc-cat-c1")) })
	}
	// Fixed: the site and its node are published.
	patch := []byte(`{"spec":{"address":"10.30.0.1"}}`)
	if _, err := h.dyn.Resource(GatewaysGVR).Patch(ctx, "site-c.gw1", "application/merge-patch+json", patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, 10*time.Second, "site-c published with its node", func() bool { _, ok := hasNode(w.siteNodes("site-c"), "bhc-cat-c1"); return ok })
	h.obs.waitFor(t, 10*time.Second, "site-c Valid=True", func() bool {
		s := h.obs.site("site-c")
		return s != nil && meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionValid)
	})
	if v := testutil.ToFloat64(in.c.metrics.catalogPublishes.WithLabelValues("ok")); v < 3 {
		t.Errorf("catalog_publishes_total{ok} = %v", v)
	}
	gap, obj, writes := w.minGap()
	t.Logf("catalog writes seen: %d; shortest gap between two writes of one object: %s (%s)", writes, gap.Round(time.Millisecond), obj)
}

// catalogScale is TestKubeCatalogScale's size: BRIDGEHEAD_CATALOG_SCALE
// nodes ("10000" for the figure), default 2,000.
func catalogScale() int {
	n := 2000
	if s := os.Getenv("BRIDGEHEAD_CATALOG_SCALE"); s != "" {
		fmt.Sscan(s, &n)
	}
	return n
}

// TestKubeCatalogJoinOneSlice: with 1,000 nodes in one site (four
// slices), a node that joins in the middle of the name order makes the
// leader write exactly one slice and the site's index, never the base,
// as a watcher of the catalog sees it. Slices cut by position in name
// order rewrote every slice after the join; a base that listed every
// slice's hash was rewritten by every join and sent to every watcher.
func TestKubeCatalogJoinOneSlice(t *testing.T) {
	const nodes = 1000
	h := startKube(t)
	h.createSite(t, "site-j", []string{"10.60.0.0/16"}, []string{"100.64.0.0/12"}, 24, 64)
	h.createGateway(t, "site-j", "gw1", "10.60.0.1", "192.0.2.60:51820")
	ctx := context.Background()
	createParallel(t, nodes, 16, func(k int) error {
		// node-0000, node-0002, ...: the joining node-0001 sorts
		// between them.
		return h.createNode(ctx, fmt.Sprintf("node-%04d", 2*k), fmt.Sprintf("10.60.%d.%d", 1+k/250, k%250+1))
	})
	w := watchCatalog(t, h.cs)
	in := h.start(t, "bhc-join", nil)
	waitLeader(t, h, in, 30*time.Second)
	w.waitFor(t, 60*time.Second, "every node in the catalog", func() bool { return len(w.siteNodes("site-j")) == nodes })
	time.Sleep(2 * time.Second) // let the last publication's echo settle
	before := w.writeCounts()
	if err := h.createNode(ctx, "node-0001", "10.60.9.1"); err != nil {
		t.Fatal(err)
	}
	w.waitFor(t, 15*time.Second, "node-0001 in the catalog", func() bool { _, ok := hasNode(w.siteNodes("site-j"), "node-0001"); return ok })
	time.Sleep(2 * time.Second) // any later write of this join would come within the catalog interval
	var wrote []string
	for name, n := range w.writeCounts() {
		if n != before[name] {
			wrote = append(wrote, fmt.Sprintf("%s x%d", name, n-before[name]))
		}
	}
	slices.Sort(wrote)
	objs := len(w.store.List())
	t.Logf("join at %d nodes (%d catalog objects): writes seen %v", nodes, objs, wrote)
	if len(wrote) != 2 || !strings.HasPrefix(wrote[0], catalog.SliceName("site-j", 0)[:len(catalog.SliceName("site-j", 0))-1]) ||
		!strings.HasSuffix(wrote[0], " x1") || wrote[1] != catalog.IndexName("site-j")+" x1" {
		t.Errorf("writes %v, want one slice and the site's index, once each, and not the base", wrote)
	}
}

// writeCounts is the number of add/update events seen per object.
func (w *catalogWatch) writeCounts() map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := map[string]int{}
	for name, ts := range w.writes {
		out[name] = len(ts)
	}
	return out
}
