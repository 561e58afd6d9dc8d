package netpol

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// RBACRules are the rules the node agent's ServiceAccount needs for
// network policy: list and watch, nothing else (the informers never get
// one object, and nothing is written). TestRealAPIServer runs the
// controller with exactly these.
var RBACRules = []rbacv1.PolicyRule{
	{APIGroups: []string{""}, Resources: []string{"pods", "namespaces"}, Verbs: []string{"list", "watch"}},
	{APIGroups: []string{"networking.k8s.io"}, Resources: []string{"networkpolicies"}, Verbs: []string{"list", "watch"}},
}

// recorder is a Writer that keeps what it was given.
type recorder struct {
	mu   sync.Mutex
	last *Ruleset
	fp   string
	n    int
	ch   chan struct{}
}

func (r *recorder) Write(rs *Ruleset) error {
	r.mu.Lock()
	r.last, r.fp = rs, Fingerprint(rs)
	r.n++
	r.mu.Unlock()
	select {
	case r.ch <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) Current() (string, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.fp, nil
}

// TestRealAPIServer: with a real kube-apiserver, and a credential that
// holds only RBACRules, the controller follows Pods, Namespaces and
// NetworkPolicies into rules: a pod on another node (another site)
// becomes a peer by its labels and namespace's labels, a label change
// moves it out, so does its namespace's, and a deleted policy lifts
// isolation.
func TestRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	admin := env.Clientset(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()

	if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-node-netpol"}, Rules: RBACRules}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-node-netpol"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "bridgehead-node-netpol"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "bridgehead-node", Namespace: "kube-system"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, groups := kubetest.ServiceAccount("kube-system", "bridgehead-node")
	sa, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}

	for _, n := range []*corev1.Namespace{ns("web", "team", "web"), ns("db", "team", "db")} {
		n.Labels = map[string]string{"team": n.Labels["team"]}
		if _, err := admin.CoreV1().Namespaces().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		// No controller-manager: the ServiceAccount admission wants it.
		if _, err := admin.CoreV1().ServiceAccounts(n.Name).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	createPod := func(p *corev1.Pod) {
		t.Helper()
		ips := p.Status.PodIPs
		p.Spec.Containers = append(p.Spec.Containers, corev1.Container{Name: "main"})
		for i := range p.Spec.Containers {
			p.Spec.Containers[i].Image = "registry.k8s.io/pause:3.10"
		}
		created, err := admin.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.PodIPs, created.Status.PodIP, created.Status.Phase = ips, ips[0].IP, corev1.PodRunning
		if _, err := admin.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The server on this node (a1), clients on a node of site b.
	srv := withPort(withIPs(mkPod("db", "pg", "a1", map[string]string{"app": "db"}), "10.244.1.10", "fd00:244:0:1::10"), "pg", corev1.ProtocolTCP, 5432)
	createPod(srv)
	createPod(withIPs(mkPod("web", "client", "b1", map[string]string{"app": "client"}), "10.245.1.20", "fd00:245:0:1::20"))
	createPod(withIPs(mkPod("web", "other", "b1", map[string]string{"app": "other"}), "10.245.1.21"))

	rec := &recorder{ch: make(chan struct{}, 1)}
	reg := prometheus.NewRegistry()
	var announced atomic.Int32 // OnEnforcing calls: once, after the first write
	c, err := New(Options{Client: sa, Node: "a1", Writer: rec, Log: slog.New(slog.DiscardHandler), Registry: reg, Debounce: 20 * time.Millisecond,
		OnEnforcing: func() { announced.Add(1) }})
	if err != nil {
		t.Fatal(err)
	}
	wg.Go(func() {
		if err := c.Run(ctx); err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	// waitFor waits until the last ruleset written satisfies ok.
	waitFor := func(what string, ok func(rs *Ruleset) bool) *Ruleset {
		t.Helper()
		deadline := time.After(20 * time.Second) // a failure bound
		for {
			rec.mu.Lock()
			rs := rec.last
			rec.mu.Unlock()
			if rs != nil && ok(rs) {
				return rs
			}
			select {
			case <-rec.ch:
			case <-deadline:
				t.Fatalf("%s: never; last ruleset:\n%v", what, rs)
			}
		}
	}
	waitFor("an empty ruleset", func(rs *Ruleset) bool { return rs.Stats.Pods == 3 && len(rs.Chains) == 0 })

	np := policy("db", "allow-pg", map[string]string{"app": "db"}, nil, []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "web"), PodSelector: sel("app", "client")}},
		Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg")},
	}}, nil)
	if _, err := admin.NetworkingV1().NetworkPolicies("db").Create(ctx, np, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := []string{
		"set a4-", "{ 10.245.1.20 }", "{ fd00:245:0:1::20 }", "{ 10.244.1.10 . tcp . 5432 }",
		"map ingress4 daddr 10.244.1.10 : jump in-", "map ingress6 daddr fd00:244:0:1::10 : jump in-",
		"# ingress db/allow-pg", "counter drop",
	}
	rs := waitFor("the policy's rules", func(rs *Ruleset) bool { return rs.Stats.LocalPolicies == 1 })
	for _, w := range want {
		if !strings.Contains(rs.String(), w) {
			t.Errorf("ruleset lacks %q:\n%s", w, rs)
		}
	}

	// A status change the compiler does not read (TestUpdateFilter).
	p, _ := admin.CoreV1().Pods("web").Get(ctx, "client", metav1.GetOptions{})
	p.Status.Conditions = append(p.Status.Conditions, corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue})
	if _, err := admin.CoreV1().Pods("web").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The client loses its label: it is no peer any more.
	p, _ = admin.CoreV1().Pods("web").Get(ctx, "client", metav1.GetOptions{})
	p.Labels = map[string]string{"app": "gone"}
	if _, err := admin.CoreV1().Pods("web").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	rs = waitFor("the client out of the peers", func(rs *Ruleset) bool { return !strings.Contains(rs.String(), "10.245.1.20") })
	if rs.Stats.LocalPolicies != 1 || rs.Stats.Dispatch != 2 {
		t.Errorf("stats %+v: the server stays isolated", rs.Stats)
	}

	// The namespace loses its label: the policy matches no namespace.
	webNS, _ := admin.CoreV1().Namespaces().Get(ctx, "web", metav1.GetOptions{})
	webNS.Labels["team"] = "x"
	p, _ = admin.CoreV1().Pods("web").Get(ctx, "client", metav1.GetOptions{})
	p.Labels = map[string]string{"app": "client"}
	if _, err := admin.CoreV1().Pods("web").Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("the client back", func(rs *Ruleset) bool { return strings.Contains(rs.String(), "10.245.1.20") })
	if _, err := admin.CoreV1().Namespaces().Update(ctx, webNS, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("web's pods out of the peers", func(rs *Ruleset) bool {
		return !strings.Contains(rs.String(), "10.245.1.20") && rs.Stats.LocalPolicies == 1 && len(rs.Sets) == 0
	})

	if err := admin.NetworkingV1().NetworkPolicies("db").Delete(ctx, "allow-pg", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor("isolation lifted", func(rs *Ruleset) bool { return rs.Stats.Policies == 0 && len(rs.Chains) == 0 })
	if got := testutil.ToFloat64(c.m.enforcing); got != 1 {
		t.Errorf("bridgehead_netpol_enforcing = %v", got)
	}
	if n := announced.Load(); n != 1 {
		t.Errorf("OnEnforcing called %d times over several writes, want once", n)
	}
	if n, err := testutil.GatherAndCount(reg, "bridgehead_netpol_syncs_total", "bridgehead_netpol_ruleset"); err != nil || n == 0 {
		t.Errorf("metrics: %d series, %v", n, err)
	}
}

// TestRestartKeepsTable: the table outlives the controller. A stopped
// agent leaves it enforcing, and a restarted one, once synced, finds
// its own fingerprint and writes nothing (a refused client stays
// refused throughout), then keeps counting verdicts in the same
// counters.
func TestRestartKeepsTable(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespace and API server; skipped with -short")
	}
	name := netnstest.New(t, "bhnprst")
	h, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	tbl := NewTable(func(o ...nftables.ConnOption) (*nftables.Conn, error) {
		return nftables.New(append(o, nftables.WithNetNSFd(int(h)))...)
	})
	env := kubetest.Start(t)
	client := env.Clientset(t)
	ctx := context.Background()
	if _, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "db"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.CoreV1().ServiceAccounts("db").Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	p := mkPod("db", "pg", "a1", map[string]string{"app": "db"})
	p.Spec.Containers = []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10"}}
	created, err := client.CoreV1().Pods("db").Create(ctx, p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.PodIPs, created.Status.PodIP, created.Status.Phase = []corev1.PodIP{{IP: "10.244.1.10"}}, "10.244.1.10", corev1.PodRunning
	if _, err := client.CoreV1().Pods("db").UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := client.NetworkingV1().NetworkPolicies("db").Create(ctx, policy("db", "deny", map[string]string{}, nil, nil, nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var announced atomic.Int32 // OnEnforcing calls, over both runs
	run := func() (*prometheus.Registry, *Controller, func()) {
		reg := prometheus.NewRegistry()
		c, err := New(Options{Client: client, Node: "a1", Writer: tbl, Log: slog.New(slog.DiscardHandler), Registry: reg,
			OnEnforcing: func() { announced.Add(1) }})
		if err != nil {
			t.Fatal(err)
		}
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); c.Run(cctx) }()
		// Written or unchanged: the first sync happened.
		deadline := time.Now().Add(20 * time.Second) // a failure bound
		for testutil.ToFloat64(c.m.syncs.WithLabelValues("written"))+testutil.ToFloat64(c.m.syncs.WithLabelValues("unchanged")) == 0 {
			if time.Now().After(deadline) {
				t.Fatal("no sync")
			}
			time.Sleep(20 * time.Millisecond)
		}
		return reg, c, func() { cancel(); <-done }
	}
	_, _, stop := run()
	fp, err := tbl.Current()
	if err != nil || fp == "" {
		t.Fatalf("no table after the first run: %q %v", fp, err)
	}
	stop()
	if after, _ := tbl.Current(); after != fp {
		t.Fatalf("the table went with the controller: %q, was %q", after, fp)
	}

	reg, c2, stop := run()
	defer stop()
	if got, _ := tbl.Current(); got != fp {
		t.Errorf("restart: table %q, want %q untouched", got, fp)
	}
	// The informers' first events may wake another compile: still
	// nothing to write.
	time.Sleep(2 * DefaultDebounce)
	if n := testutil.ToFloat64(c2.m.syncs.WithLabelValues("written")); n != 0 {
		t.Errorf("restart wrote the table %v times, want 0", n)
	}
	// Writing nothing, it still enforces, and says so: the Node
	// condition (OnEnforcing) and verify read it.
	if got := testutil.ToFloat64(c2.m.enforcing); got != 1 {
		t.Errorf("after the restart bridgehead_netpol_enforcing = %v, want 1: the table in place holds the synced ruleset", got)
	}
	if n := announced.Load(); n != 2 {
		t.Errorf("OnEnforcing called %d times over two runs, want once each", n)
	}
	if n, err := testutil.GatherAndCount(reg, "bridgehead_netpol_verdicts_total"); err != nil || n != 1 {
		t.Errorf("verdict series after the restart: %d %v, want the drop counter of db/deny", n, err)
	}
}
