package kubenode

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// catalog is nodeagent's test catalog: sites a and b, nodes a1, a2, b1, b2.
var catalog = filepath.Join("..", "testdata", "catalog.yaml")

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

func start(t *testing.T, nodes ...*corev1.Node) (*Source, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	client := fake.NewClientset()
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(context.Background(), n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	rec := record.NewFakeRecorder(10)
	s, err := New(ctx, client, rec, catalog, "a1", slog.New(slog.DiscardHandler))
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		time.Sleep(50 * time.Millisecond) // let the informer and watcher goroutines see the end
	})
	return s, client, rec
}

func routes(t *testing.T, s *Source) string {
	t.Helper()
	d, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range d.Routes {
		out = append(out, r.String())
	}
	return strings.Join(out, "\n")
}

// TestLoadFromNodes: the Node objects replace the catalog's nodes of
// their site; sites without Node objects keep the catalog's.
func TestLoadFromNodes(t *testing.T) {
	s, _, rec := start(t,
		node("a1", "a", []string{"10.244.7.0/24", "fd00:244:0:7::/64"}, "10.224.0.11", "fd00:224::11"),
		node("a3", "a", []string{"10.244.9.0/24"}, "10.224.0.13"),
		node("a4", "a", nil, "10.224.0.14"), // no range yet: left out
	)
	d, err := s.Load()
	if err != nil {
		t.Fatal(err)
	}
	if d.PodCIDR.String() != "10.244.7.0/24" || d.PodCIDR6.String() != "fd00:244:0:7::/64" || d.Site != "a" {
		t.Errorf("model %s %v %v", d.Site, d.PodCIDR, d.PodCIDR6)
	}
	got := routes(t, s)
	for _, want := range []string{"10.244.9.0/24 via 10.224.0.13", "10.245.0.0/16 via 10.224.0.4"} {
		if !strings.Contains(got, want) {
			t.Errorf("routes lack %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "10.244.2.0/24") {
		t.Errorf("the catalog's node a2 is still routed though Nodes list site a's nodes:\n%s", got)
	}
	select {
	case e := <-rec.Events:
		t.Errorf("event for a configured node: %s", e)
	default:
	}
}

// TestNotConfigured: a node without a site or a pod range fails to load,
// with one Warning Event per reason, and one Normal Event on recovery.
func TestNotConfigured(t *testing.T) {
	s, client, rec := start(t, node("a1", "", nil, "10.224.0.11"))
	ctx := context.Background()
	expect := func(wantErr, wantEvent string) {
		t.Helper()
		_, err := s.Load()
		if wantErr == "" && err != nil || wantErr != "" && (err == nil || !strings.Contains(err.Error(), wantErr)) {
			t.Errorf("Load: %v, want %q", err, wantErr)
		}
		select {
		case e := <-rec.Events:
			if wantEvent == "" || !strings.Contains(e, wantEvent) {
				t.Errorf("event %q, want %q", e, wantEvent)
			}
		case <-time.After(100 * time.Millisecond):
			if wantEvent != "" {
				t.Errorf("no event, want %q", wantEvent)
			}
		}
	}
	update := func(mut func(n *corev1.Node)) {
		t.Helper()
		n, err := client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mut(n)
		// A signal left from the Node's Add must not pass for this one.
		select {
		case <-s.Changed():
		default:
		}
		up, err := client.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		select {
		case <-s.Changed():
		case <-time.After(10 * time.Second): // a failure bound
			t.Fatal("no Changed signal for a Node update")
		}
		if got, err := s.nodes.Get("a1"); err != nil || got.ResourceVersion != up.ResourceVersion {
			t.Fatalf("signalled before the informer's cache holds the update: %v", err)
		}
	}
	expect("has no label bridgehead.io/site", "Warning BridgeheadNodeNotConfigured NoSite")
	expect("has no label bridgehead.io/site", "") // same reason: no second Event
	update(func(n *corev1.Node) { n.Labels[SiteLabel] = "a" })
	expect("has no pod range yet", "Warning BridgeheadNodeNotConfigured NoPodCIDR")
	update(func(n *corev1.Node) { n.Annotations = map[string]string{PodCIDRsAnnotation: "10.244.5.0/24"} })
	expect("", "Normal BridgeheadNodeConfigured")
	if d, err := s.Load(); err != nil || d.PodCIDR.String() != "10.244.5.0/24" {
		t.Errorf("pod range from the annotation: %v %v", d, err)
	}
}

func TestNodeUpdatedIgnoresHeartbeats(t *testing.T) {
	s := &Source{changed: make(chan struct{}, 1)}
	a := node("a1", "a", []string{"10.244.1.0/24"}, "10.224.0.11")
	b := a.DeepCopy()
	b.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, LastHeartbeatTime: metav1.Now()}}
	s.nodeUpdated(a, b)
	select {
	case <-s.changed:
		t.Error("a heartbeat signalled a change")
	default:
	}
	b.Spec.PodCIDRs = []string{"10.244.2.0/24"}
	s.nodeUpdated(a, b)
	select {
	case <-s.changed:
	default:
		t.Error("a new pod range did not signal")
	}
}
