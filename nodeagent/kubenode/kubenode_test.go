package kubenode

import (
	"context"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube/catalog"
	"github.com/bridgehead/bridgehead/kube/follow"
	"github.com/bridgehead/bridgehead/nodeagent"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testCatalog is nodeagent's test catalog: sites a and b, nodes a1, a2,
// b1, b2.
var testCatalog = filepath.Join("..", "testdata", "catalog.yaml")

// nodeConfig is where the test's catalog file goes (not there yet).
func nodeConfig(t *testing.T) string { return filepath.Join(t.TempDir(), "catalog.yaml") }

var serviceCIDRs = []netip.Prefix{netip.MustParsePrefix("10.96.0.0/16"), netip.MustParsePrefix("fd00:96::/108")}

// published is the controller's publication of the test catalog, with
// mutate applied to its sites first.
func published(t *testing.T, mutate func([]config.Site)) []*corev1.ConfigMap {
	t.Helper()
	c, err := config.Load(testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(c.Sites)
	}
	cms, err := catalog.Render(c.Sites, catalog.Namespace(config.DefaultCatalogNamespace))
	if err != nil {
		t.Fatal(err)
	}
	return cms
}

func node(name, site string, podCIDRs []string, addrs ...string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}, Spec: corev1.NodeSpec{PodCIDRs: podCIDRs}}
	if site != "" {
		n.Labels[SiteLabel] = site
	}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a})
	}
	return n
}

func newSource(t *testing.T, client kubernetes.Interface, cfg string) (*Source, *record.FakeRecorder) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	rec := record.NewFakeRecorder(10)
	s, err := New(ctx, Options{Client: client, Node: "a1", Namespace: config.DefaultCatalogNamespace, Catalog: cfg, ServiceCIDRs: serviceCIDRs, Recorder: rec, Log: slog.New(slog.DiscardHandler)})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		s.Wait()
		time.Sleep(50 * time.Millisecond) // the file watcher sees the end
	})
	return s, rec
}

// loadWhen calls Load after each Changed signal until it returns a model,
// or fails the test after a bound.
func loadWhen(t *testing.T, s *Source) *nodeagent.Desired {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second) // a failure bound
	for {
		d, err := s.Load()
		if err == nil {
			return d
		}
		if time.Now().After(deadline) {
			t.Fatalf("no model: %v", err)
		}
		select {
		case <-s.Changed():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func routeList(d *nodeagent.Desired) string {
	var out []string
	for _, r := range d.Routes {
		out = append(out, r.String())
	}
	return strings.Join(out, "\n")
}

// TestPublishedCatalog: the node's model comes from the controller's
// publication, read through the follower into the catalog file: nothing
// is rendered by hand. The node's own range is the published one (the
// allocator's record), not the Node's spec.podCIDRs, which the test makes
// disagree.
func TestPublishedCatalog(t *testing.T) {
	client := fake.NewClientset(node("a1", "a", []string{"10.244.99.0/24"}, "10.224.0.11"))
	for _, cm := range published(t, nil) {
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(context.Background(), cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := nodeConfig(t)
	s, _ := newSource(t, client, cfg)
	d := loadWhen(t, s)
	if d.Site != "a" || d.PodCIDR.String() != "10.244.1.0/24" || d.PodCIDR6.String() != "fd00:244:0:1::/64" {
		t.Errorf("model %s %v %v, want a 10.244.1.0/24 fd00:244:0:1::/64 (the published range)", d.Site, d.PodCIDR, d.PodCIDR6)
	}
	got := routeList(d)
	for _, want := range []string{"10.244.2.0/24 via 10.224.0.12", "10.245.0.0/16 via 10.224.0.4"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes lack %q:\n%s", want, got)
		}
	}
	if b, err := os.ReadFile(cfg); err != nil || !strings.Contains(string(b), "name: a2") {
		t.Errorf("catalog file: %v\n%s", err, b)
	}

	// A node joins site a: the controller rewrites a's slice, the agent
	// follows.
	for _, cm := range published(t, func(sites []config.Site) {
		n := sites[0].Nodes[1]
		n.Name, n.Address, n.Address6 = "a3", n.Address.Next(), n.Address6.Next()
		n.PodCIDR = netip.MustParsePrefix("10.244.3.0/24")
		n.PodCIDR6 = netip.MustParsePrefix("fd00:244:0:3::/64")
		sites[0].Nodes = append(sites[0].Nodes, n)
	}) {
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Update(context.Background(), cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !strings.Contains(routeList(loadWhen(t, s)), "10.244.3.0/24 via 10.224.0.13") {
		if time.Now().After(deadline) {
			t.Fatalf("the joined node's range is not routed:\n%s", routeList(loadWhen(t, s)))
		}
		select {
		case <-s.Changed():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// TestWaitsForController: a Node without a site label, then with one but
// not yet published, fails to load with one Warning Event per reason, and
// one Normal Event once the controller publishes it.
func TestWaitsForController(t *testing.T) {
	client := fake.NewClientset(node("a1", "", nil, "10.224.0.11"))
	s, rec := newSource(t, client, nodeConfig(t))
	ctx := context.Background()
	expect := func(wantErr, wantEvent string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a failure bound
		var err error
		for {
			_, err = s.Load()
			if wantErr == "" && err == nil || wantErr != "" && err != nil && strings.Contains(err.Error(), wantErr) {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("Load: %v, want %q", err, wantErr)
			}
			select {
			case <-s.Changed():
			case <-time.After(100 * time.Millisecond):
			}
		}
		for {
			select {
			case e := <-rec.Events:
				if strings.Contains(e, wantEvent) {
					return
				}
				t.Logf("event %q", e)
				continue
			case <-time.After(time.Second):
				if wantEvent != "" {
					t.Errorf("no event %q", wantEvent)
				}
			}
			return
		}
	}
	expect("has no label bridgehead.io/site", "Warning BridgeheadNodeNotConfigured NoSite")
	n, err := client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n.Labels = map[string]string{SiteLabel: "a"}
	if _, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	expect("no catalog in", "Warning BridgeheadNodeNotConfigured NoCatalog")
	// Published without a1: the node waits for its range.
	for _, cm := range published(t, func(sites []config.Site) { sites[0].Nodes = sites[0].Nodes[1:] }) {
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect(`Node "a1" is not in site "a" of the catalog yet`, "Warning BridgeheadNodeNotConfigured NotPublished")
	for _, cm := range published(t, nil) {
		if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	expect("", "Normal BridgeheadNodeConfigured")
}

// TestOfflineStart: with the API server away, a node that has its
// catalog file from before comes back on it at once: routes and SNAT do
// not wait for an informer that cannot sync.
func TestOfflineStart(t *testing.T) {
	cfg := nodeConfig(t)
	c, err := config.Load(testCatalog)
	if err != nil {
		t.Fatal(err)
	}
	data, err := renderSites(c.Sites)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cfg, data, 0o644); err != nil {
		t.Fatal(err)
	}
	// Nothing listens on port 1: every list and watch fails.
	client, err := kubernetes.NewForConfig(&rest.Config{Host: "https://127.0.0.1:1", Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := newSource(t, client, cfg)
	d, err := s.Load()
	if err != nil {
		t.Fatalf("offline start: %v", err)
	}
	if d.PodCIDR.String() != "10.244.1.0/24" || len(d.Routes) == 0 {
		t.Errorf("offline model %v, %d routes", d.PodCIDR, len(d.Routes))
	}
}

// renderSites is the catalog file the follower would write for sites.
func renderSites(sites []config.Site) ([]byte, error) { return follow.Render(sites, nil) }
