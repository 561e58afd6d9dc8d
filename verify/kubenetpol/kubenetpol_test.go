package kubenetpol

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/nodeagent"
	"github.com/bridgehead/bridgehead/nodeagent/kubenode"
	"github.com/bridgehead/bridgehead/verify"
)

// TestCheck against a real kube-apiserver: Nodes whose conditions the
// node agent's own ConditionReporter writes (enforcing, off, waiting, an
// agent older than the enforcement that writes no state, a stale one)
// and one without, with no policy (SKIP), then with one (FAIL naming
// each node, its cause and fix), then with every agent enforcing (PASS).
func TestCheck(t *testing.T) {
	env := kubetest.Start(t)
	client := env.Clientset(t)
	ctx := context.Background()
	now := time.Now()
	log := slog.New(slog.DiscardHandler)
	healthy := nodeagent.Status{Configured: true, CNIWritten: true, Routes: 4}
	// report writes node's condition as an agent in state would ("":
	// an agent that predates the state); at is its clock.
	report := func(node, state string, at time.Time) {
		t.Helper()
		r := kubenode.NewConditionReporter(client, node, log, func() time.Time { return at })
		r.Report(healthy)
		if state != "" {
			r.ReportNetworkPolicy(state)
		}
		if err := r.Flush(ctx); err != nil {
			t.Fatal(err)
		}
	}
	nodes := []string{"a-1", "a-2", "b-1", "b-2", "b-3", "b-4"}
	for _, n := range nodes {
		if _, err := client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	report("a-1", kubenode.NetworkPolicyEnforced, now)
	report("a-2", "", now) // an old image
	report("b-1", kubenode.NetworkPolicyOff, now)
	report("b-2", kubenode.NetworkPolicyWaiting, now)
	report("b-3", kubenode.NetworkPolicyEnforced, now.Add(-time.Hour)) // its agent is gone
	// b-4: no agent at all.

	if c := Check(ctx, client, now); c.Result != verify.Skip || !strings.Contains(c.Detail, "no NetworkPolicy") {
		t.Fatalf("no policy: %+v, want SKIP", c)
	}
	pol := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "deny"},
		Spec: networkingv1.NetworkPolicySpec{PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if _, err := client.NetworkingV1().NetworkPolicies("default").Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c := Check(ctx, client, now)
	t.Logf("%s %s: %s", c.Result, c.Figure, c.Detail)
	if c.Result != verify.Fail || c.Figure != "1 policies, not enforced on 5 of 6 nodes" {
		t.Fatalf("got %+v, want FAIL on 5 of 6 nodes", c)
	}
	for _, want := range []string{
		"no bridgehead node agent reports on b-4: is the bridgehead-node DaemonSet scheduled",
		"stopped reporting (condition older than 30m0s) on b-3",
		"predates NetworkPolicy enforcement on a-2: upgrade",
		"--network-policy=false on b-1: remove --network-policy=false",
		"has not written its policy table on b-2: its log says why",
	} {
		if !strings.Contains(c.Detail, want) {
			t.Errorf("detail lacks %q", want)
		}
	}
	if strings.Contains(c.Detail, "a-1") {
		t.Errorf("detail names a-1, which enforces")
	}

	for _, n := range []string{"a-2", "b-1", "b-2", "b-3", "b-4"} {
		report(n, kubenode.NetworkPolicyEnforced, now)
	}
	if c := Check(ctx, client, now); c.Result != verify.Pass || c.Figure != "1 policies, enforced on 6 of 6 nodes" {
		t.Fatalf("every agent enforcing: %+v, want PASS", c)
	}
}

// TestNetworkPolicyState: the state is the message's last part, after
// whatever the agent's status says (errors included).
func TestNetworkPolicyState(t *testing.T) {
	for _, c := range []struct {
		msg, state string
		ok         bool
	}{
		{"CNI config written", "", false},
		{"CNI config written; network policy: enforced", "enforced", true},
		{"CNI config written; routes: network policy: x; network policy: off (--network-policy=false)", "off (--network-policy=false)", true},
	} {
		if state, ok := kubenode.NetworkPolicyState(c.msg); state != c.state || ok != c.ok {
			t.Errorf("%q: %q %v, want %q %v", c.msg, state, ok, c.state, c.ok)
		}
	}
}
