package follow

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/internal/syncbuf"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const ns = "bridgehead-system"

// Keys of the two sites' gateways (any valid keys: the checks run with
// SkipPrivateKey).
const (
	keyA = "SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4="
	keyB = "fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M="
)

// labSites is sites a and b with n nodes each; b's pod CIDR is bPods.
func labSites(n int, bPods string) []config.Site {
	a := config.Site{Name: "a", NodeCIDRs: pfx("10.1.0.0/16"), PodCIDRs: pfx("10.64.0.0/14"),
		Gateways: []config.Gateway{{Name: "gw-a1", Address: netip.MustParseAddr("10.1.0.2"), Endpoint: "192.0.2.1:51820", PublicKey: keyA}}}
	b := config.Site{Name: "b", NodeCIDRs: pfx("10.2.0.0/16"), PodCIDRs: pfx(bPods),
		Gateways: []config.Gateway{{Name: "gw-b1", Address: netip.MustParseAddr("10.2.0.2"), Endpoint: "192.0.2.2:51820", PublicKey: keyB}}}
	for i := range n {
		a.Nodes = append(a.Nodes, config.Node{Name: fmt.Sprintf("a-%04d", i),
			Address: netip.AddrFrom4([4]byte{10, 1, byte(1 + i/250), byte(1 + i%250)}), PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(64 + i/256), byte(i), 0}), 24)})
		b.Nodes = append(b.Nodes, config.Node{Name: fmt.Sprintf("b-%04d", i),
			Address: netip.AddrFrom4([4]byte{10, 2, byte(1 + i/250), byte(1 + i%250)})})
	}
	return []config.Site{a, b}
}

func pfx(s string) []netip.Prefix { return []netip.Prefix{netip.MustParsePrefix(s)} }

// publish writes a publication as the controller does: slices first,
// then the indexes, the base last, then deletes slices and indexes no
// longer listed.
func publish(t *testing.T, cs kubernetes.Interface, sites []config.Site, opts ...catalog.Option) {
	t.Helper()
	cms, err := catalog.Render(sites, append([]catalog.Option{catalog.Namespace(ns)}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	keep := map[string]bool{}
	for _, cm := range append(cms[1:], cms[0]) {
		keep[cm.Name] = true
		apply(t, cs, cm)
	}
	list, err := cs.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{LabelSelector: catalog.CatalogLabel + " in (" + catalog.KindNodes + "," + catalog.KindIndex + ")"})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if !keep[cm.Name] {
			if err := cs.CoreV1().ConfigMaps(ns).Delete(context.Background(), cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func apply(t *testing.T, cs kubernetes.Interface, cm *corev1.ConfigMap) {
	t.Helper()
	ctx := context.Background()
	_, err := cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if apierrors.IsNotFound(err) {
		_, err = cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
	}
	if err != nil {
		t.Fatal(err)
	}
}

// gatewayConfig writes gateway a1's config, following catalog.yaml
// beside it, and returns the validate function the daemon would pass.
func gatewayConfig(t *testing.T, dir string) (catalogPath string, validate func([]byte) error) {
	t.Helper()
	path := filepath.Join(dir, "a.yaml")
	text := "site: a\ngateway: gw-a1\nprivateKeyFile: a.key\nkubernetes: {kubeconfig: kc, follow: true}\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, config.DefaultCatalogFile), func(cat []byte) error {
		_, problems, _ := config.CheckWithCatalog(path, []byte(text), cat, config.CheckOptions{SkipPrivateKey: true})
		return problems.Err()
	}
}

type followerRun struct {
	f       *Follower
	reg     *prometheus.Registry
	changed atomic.Int64
	logs    syncbuf.Buffer // the follower's log, also on stderr
	stop    func()
}

func startFollower(t *testing.T, cs kubernetes.Interface, path string, validate func([]byte) error) *followerRun {
	t.Helper()
	fr := &followerRun{reg: prometheus.NewRegistry()}
	f, err := New(Options{Client: cs, Namespace: ns, Site: "a", Gateway: "gw-a1", Path: path, Validate: validate,
		Changed: func() { fr.changed.Add(1) }, Log: slog.New(slog.NewTextHandler(io.MultiWriter(os.Stderr, &fr.logs), nil)), Registry: fr.reg})
	if err != nil {
		t.Fatal(err)
	}
	fr.f = f
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); f.Run(ctx) }()
	fr.stop = func() { cancel(); <-done }
	t.Cleanup(fr.stop)
	return fr
}

// waitFor polls cond (a test's view of the file and metrics) every 20 ms.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func fileSites(t *testing.T, path string) []config.Site {
	t.Helper()
	if c := fileConfig(t, path); c != nil {
		return c.Sites
	}
	return nil
}

// fileConfig is gateway a1's config with the catalog file at path, read
// the way the daemon does; nil when there is no file yet.
func fileConfig(t *testing.T, path string) *config.Config {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	dir := filepath.Dir(path)
	text := "site: a\ngateway: gw-a1\nprivateKeyFile: a.key\nkubernetes: {kubeconfig: kc, follow: true}\n"
	c, problems, _ := config.CheckWithCatalog(filepath.Join(dir, "a.yaml"), []byte(text), data, config.CheckOptions{SkipPrivateKey: true})
	if len(problems) > 0 {
		t.Fatalf("the written catalog does not check: %v", problems)
	}
	return c
}

func nodesOf(sites []config.Site, name string) int {
	for _, s := range sites {
		if s.Name == name {
			return len(s.Nodes)
		}
	}
	return -1
}

// TestFollow against the real API server: the follower writes its own
// site's nodes and every site's aggregates; a join rewrites the file; an
// incomplete publication, a malformed one and one that fails the checks
// are not written (counted, file kept); an unchanged publication is not
// written again; a follower restarted on the same file does not rewrite
// it.
func TestFollow(t *testing.T) {
	env := kubetest.Start(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	path, validate := gatewayConfig(t, dir)
	fr := startFollower(t, cs, path, validate)
	writes := func() float64 { return testutil.ToFloat64(fr.f.m.writes) }
	refused := func(s State) float64 { return testutil.ToFloat64(fr.f.m.refused.WithLabelValues(string(s))) }

	// Nothing published yet: incomplete, no file.
	waitFor(t, "no base counted as incomplete", 20*time.Second, func() bool { return refused(StateIncomplete) >= 1 })
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("catalog file written without a publication: %v", err)
	}

	// 600 nodes a site: two slices each; the gateway takes only a's.
	publish(t, cs, labSites(600, "10.102.0.0/16"))
	select {
	case <-fr.f.Written():
	case <-time.After(10 * time.Second):
		t.Fatal("not written within 10 s")
	}
	sites := fileSites(t, path)
	if len(sites) != 2 || nodesOf(sites, "a") != 600 || nodesOf(sites, "b") != 0 {
		t.Fatalf("file: %d sites, a %d nodes, b %d nodes; want 2, 600, 0", len(sites), nodesOf(sites, "a"), nodesOf(sites, "b"))
	}
	if writes() != 1 || fr.changed.Load() != 1 {
		t.Fatalf("%v writes, %d changed calls; want 1", writes(), fr.changed.Load())
	}

	// A join in a's second slice.
	joined := labSites(601, "10.102.0.0/16")
	publish(t, cs, joined)
	waitFor(t, "the join written", 10*time.Second, func() bool { return nodesOf(fileSites(t, path), "a") == 601 })

	// Incomplete: a's index listing a slice that is not there yet.
	before, _ := os.ReadFile(path)
	cms, err := catalog.Render(labSites(602, "10.102.0.0/16"), catalog.Namespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	inc := refused(StateIncomplete)
	for _, cm := range cms {
		if cm.Name == catalog.IndexName("a") {
			apply(t, cs, cm) // the index only
		}
	}
	waitFor(t, "the incomplete publication seen", 10*time.Second, func() bool { return refused(StateIncomplete) > inc })
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("an incomplete publication changed the file")
	}
	for _, cm := range cms[1:] {
		apply(t, cs, cm)
	}
	waitFor(t, "the completed publication written", 10*time.Second, func() bool { return nodesOf(fileSites(t, path), "a") == 602 })

	// Fails the gateway's checks: b's pods overlap a's.
	before, _ = os.ReadFile(path)
	w := writes()
	publish(t, cs, labSites(602, "10.65.128.0/17"))
	waitFor(t, "the overlapping catalog refused", 10*time.Second, func() bool { return refused(StateRefused) >= 1 })
	if after, _ := os.ReadFile(path); string(after) != string(before) || writes() != w {
		t.Fatal("a refused catalog changed the file")
	}
	if got := testutil.ToFloat64(fr.f.m.states.WithLabelValues(string(StateRefused))); got != 1 {
		t.Errorf("state refused = %v", got)
	}

	// Malformed base.
	bad := cms[0].DeepCopy()
	bad.Data[catalog.SitesKey] = "sites: [{name: a, bogus: 1}]"
	apply(t, cs, bad)
	waitFor(t, "the malformed base refused", 10*time.Second, func() bool { return refused(StateMalformed) >= 1 })

	// Back to the good catalog the file holds: current again, no write;
	// then the same data again: no write either.
	publish(t, cs, labSites(602, "10.102.0.0/16"))
	waitFor(t, "current again", 10*time.Second, func() bool {
		return testutil.ToFloat64(fr.f.m.states.WithLabelValues(string(StateCurrent))) == 1
	})
	ev := testutil.ToFloat64(fr.f.m.evaluations)
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(ctx, catalog.BaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Annotations = map[string]string{"touched": "yes"} // same data
	apply(t, cs, cm)
	waitFor(t, "the touched base evaluated", 10*time.Second, func() bool { return testutil.ToFloat64(fr.f.m.evaluations) > ev })
	if writes() != w {
		t.Errorf("an unchanged publication was written again: %v writes", writes()-w)
	}

	// A new follower on the same file and publication writes nothing.
	fr.stop()
	fr2 := startFollower(t, cs, path, validate)
	select {
	case <-fr2.f.Written():
	case <-time.After(10 * time.Second):
		t.Fatal("restarted follower did not accept the file within 10 s")
	}
	if got := testutil.ToFloat64(fr2.f.m.writes); got != 0 {
		t.Errorf("restarted follower rewrote an unchanged file (%v writes)", got)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 2 {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("files left in the directory: %s", strings.Join(names, ", "))
	}
}

// TestFollowAPIServerGone: with the API server stopped the file stays
// as it is, the refused connections are counted by reason, the connected
// gauge drops and one line says so, however many retries; started
// again, the follower resyncs without a restart, writes what changed,
// the gauge and the last-sync time move, and one line says it is back.
func TestFollowAPIServerGone(t *testing.T) {
	env := kubetest.Start(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path, validate := gatewayConfig(t, t.TempDir())
	fr := startFollower(t, cs, path, validate)
	publish(t, cs, labSites(3, "10.102.0.0/16"))
	waitFor(t, "first write", 20*time.Second, func() bool { return nodesOf(fileSites(t, path), "a") == 3 })
	connected := func() float64 { return testutil.ToFloat64(fr.f.m.connected) }
	refused := func() float64 { return testutil.ToFloat64(fr.f.m.watchErrors.WithLabelValues(reasonRefused)) }
	lastSync := func() float64 { return testutil.ToFloat64(fr.f.m.lastSync) }
	waitFor(t, "connected", 10*time.Second, func() bool { return connected() == 1 })
	before, _ := os.ReadFile(path)

	if err := env.StopAPIServer(); err != nil {
		t.Logf("%v (gone either way)", err)
	}
	stopped := time.Now()
	waitFor(t, "the refused connections counted", 20*time.Second, func() bool { return refused() > 0 && connected() == 0 })
	t.Logf("disconnected %v after the API server's stop returned", time.Since(stopped).Round(time.Millisecond))
	// More retries (the reflectors back off from 0.8 s), no more lines.
	waitFor(t, "retries", 20*time.Second, func() bool { return refused() >= 3 })
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Fatal("the file changed while the API server was away")
	}
	synced := lastSync()
	if err := env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	publish(t, cs, labSites(4, "10.102.0.0/16"))
	waitFor(t, "the change after the API server came back", 60*time.Second, func() bool { return nodesOf(fileSites(t, path), "a") == 4 })
	waitFor(t, "connected again", 60*time.Second, func() bool { return connected() == 1 })
	t.Logf("written and connected %v after the publication that followed the restart; %v refused connections counted",
		time.Since(start).Round(time.Millisecond), refused())
	if lastSync() <= synced {
		t.Errorf("last sync %v did not move (was %v)", lastSync(), synced)
	}
	// The file is renamed into place a moment before the count moves.
	waitFor(t, "two writes (one before the stop, one after)", 5*time.Second, func() bool { return testutil.ToFloat64(fr.f.m.writes) >= 2 })
	if got := testutil.ToFloat64(fr.f.m.writes); got != 2 {
		t.Errorf("%v writes, want 2 (one before the stop, one after)", got)
	}
	logs := fr.logs.String()
	const downLine, upLine = "catalog watch cannot reach the API server", "catalog watch reaches the API server again"
	if down, up := strings.Count(logs, downLine), strings.Count(logs, upLine); down != 1 || up != 1 {
		t.Errorf("%d disconnected and %d reconnected lines over %v refused connections, want one each:\n%s", down, up, refused(), logs)
	}
}

// TestFollowRelay: the site's relay published in the base becomes the
// gateway's relay section in the catalog file (listening on its address
// at the published port), follows changes, and goes when the site
// stops publishing one; another site's relay is not this gateway's.
func TestFollowRelay(t *testing.T) {
	env := kubetest.Start(t)
	cs := env.Clientset(t)
	if _, err := cs.CoreV1().Namespaces().Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	path, validate := gatewayConfig(t, t.TempDir())
	fr := startFollower(t, cs, path, validate)
	sites := labSites(2, "10.102.0.0/16")
	relayOf := func() *config.Relay {
		if c := fileConfig(t, path); c != nil {
			return c.Relay
		}
		return nil
	}
	listen := func(want string) func() bool {
		return func() bool {
			rl := relayOf()
			return rl != nil && rl.Listen == want || rl == nil && want == ""
		}
	}

	publish(t, cs, sites, catalog.Relays(map[string]*v1.RelaySpec{
		"a": {Port: 8131, AllowedPorts: []int32{10250, 10255}, HeaderTimeout: &metav1.Duration{Duration: 30 * time.Second}},
	}))
	waitFor(t, "the relay written", 10*time.Second, listen("10.1.0.2:8131"))
	rl := relayOf()
	if !slices.Equal(rl.AllowedPorts, []int{10250, 10255}) || rl.HeaderTimeout != 30*time.Second || rl.MaxConnections != config.DefaultRelayMaxConnections {
		t.Errorf("relay %+v", *rl)
	}

	// A change of the site's relay is a new file; b's relay is not a's.
	publish(t, cs, sites, catalog.Relays(map[string]*v1.RelaySpec{"a": {Port: 8132}, "b": {Port: 9000}}))
	waitFor(t, "the moved relay written", 10*time.Second, listen("10.1.0.2:8132"))
	if rl := relayOf(); !slices.Equal(rl.AllowedPorts, []int{config.DefaultRelayPort}) {
		t.Errorf("allowed ports %v, want the default", rl.AllowedPorts)
	}

	// Not published for a any more: the section goes (the relay stops).
	publish(t, cs, sites, catalog.Relays(map[string]*v1.RelaySpec{"b": {Port: 9000}}))
	waitFor(t, "the relay removed", 10*time.Second, listen(""))

	// A base whose relays do not decode is malformed: the file stays.
	before, _ := os.ReadFile(path)
	cm, err := cs.CoreV1().ConfigMaps(ns).Get(context.Background(), catalog.BaseName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cm.Data[catalog.RelaysKey] = "a: {port: 1, bogus: 2}"
	apply(t, cs, cm)
	waitFor(t, "the malformed relays refused", 10*time.Second, func() bool {
		return testutil.ToFloat64(fr.f.m.refused.WithLabelValues(string(StateMalformed))) >= 1
	})
	if after, _ := os.ReadFile(path); string(after) != string(before) {
		t.Error("malformed relays changed the file")
	}
}
