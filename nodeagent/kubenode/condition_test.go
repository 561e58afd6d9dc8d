package kubenode

import (
	"context"
	"log/slog"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/nodeagent"
)

func TestCondition(t *testing.T) {
	errs := func(stages ...string) []nodeagent.StageError {
		var out []nodeagent.StageError
		for _, s := range stages {
			out = append(out, nodeagent.StageError{Stage: s, Err: s + " broke"})
		}
		return out
	}
	tests := []struct {
		name   string
		st     nodeagent.Status
		status corev1.ConditionStatus
		reason string
		msg    string
	}{
		{"configured", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 7},
			corev1.ConditionTrue, ConditionConfigured, "CNI config written"},
		{"no model", nodeagent.Status{Errors: errs("catalog")},
			corev1.ConditionFalse, ConditionNotConfigured, "CNI config not written; catalog: catalog broke"},
		{"stale catalog", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 7, Errors: errs("catalog")},
			corev1.ConditionTrue, ConditionCatalogStale, "CNI config written; catalog: catalog broke"},
		{"cni", nodeagent.Status{Configured: true, Errors: errs("cni", "routes")},
			corev1.ConditionFalse, ConditionCNIFailed, "CNI config not written; cni: cni broke; routes: routes broke"},
		{"routes", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 2, Errors: errs("routes", "snat")},
			corev1.ConditionFalse, ConditionRoutesFailed, "CNI config written; routes: routes broke; snat: snat broke"},
		{"snat", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 7, Errors: errs("snat")},
			corev1.ConditionFalse, ConditionSNATFailed, "CNI config written; snat: snat broke"},
		{"bridge netfilter", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 7, Errors: errs("bridge-netfilter")},
			corev1.ConditionFalse, ConditionBridgeNetfilter, "CNI config written; bridge-netfilter: bridge-netfilter broke"},
		{"forward blocked", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 7, Errors: errs("bridge-netfilter", "forward")},
			corev1.ConditionFalse, ConditionForwardBlocked, "CNI config written; bridge-netfilter: bridge-netfilter broke; forward: forward broke"},
		{"cni not written", nodeagent.Status{Configured: true},
			corev1.ConditionFalse, ConditionCNINotWritten, "CNI config not written"},
		// The route count changes with every node that joins the site:
		// in the message, one join would rewrite every Node's condition,
		// and each write would reach every watcher of Nodes.
		{"routes counted elsewhere", nodeagent.Status{Configured: true, CNIWritten: true, Routes: 8},
			corev1.ConditionTrue, ConditionConfigured, "CNI config written"},
		{"long error", nodeagent.Status{Configured: true, CNIWritten: true, Errors: []nodeagent.StageError{{Stage: "snat", Err: strings.Repeat("x", 5000)}}},
			corev1.ConditionFalse, ConditionSNATFailed, "CNI config written; snat: " + strings.Repeat("x", maxMessage-3-len("CNI config written; snat: ")) + "..."},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, reason, msg := Condition(tt.st)
			if status != tt.status || reason != tt.reason || msg != tt.msg {
				t.Errorf("Condition = %s %s %q\nwant %s %s %q", status, reason, msg, tt.status, tt.reason, tt.msg)
			}
		})
	}
}

// TestConditionRealAPIServer: with exactly the credential of
// deploy/kubernetes/node-rbac.yaml (applied with kubectl, requests
// impersonating the ServiceAccount), the reporter writes the condition
// into nodes/status of a real kube-apiserver, leaves the kubelet's
// conditions alone, moves lastTransitionTime only when the status flips,
// and retries after the Node appears.
func TestConditionRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	admin := env.Clientset(t)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: config.DefaultCatalogNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", env.Kubeconfig, "apply", "-f", "../../deploy/kubernetes/node-rbac.yaml").CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply node-rbac.yaml: %v\n%s", err, out)
	}
	user, groups := kubetest.ServiceAccount("kube-system", "bridgehead-node")
	sa, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}

	clock := time.Date(2026, 12, 2, 1, 0, 0, 0, time.UTC)
	var clockMu sync.Mutex
	now := func() time.Time { clockMu.Lock(); defer clockMu.Unlock(); clock = clock.Add(time.Minute); return clock }
	reporter := func(node string) *ConditionReporter {
		r := NewConditionReporter(sa, node, slog.New(slog.DiscardHandler), now)
		r.Retry = 50 * time.Millisecond
		wg.Add(1)
		go func() { defer wg.Done(); r.Run(ctx) }()
		return r
	}

	// c1 has the kubelet's Ready condition.
	created, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c1"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := corev1.NodeCondition{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady", Message: "kubelet is posting ready status",
		LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}
	created.Status.Conditions = []corev1.NodeCondition{ready}
	if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	wait := func(node string, want corev1.ConditionStatus, reason string) corev1.NodeCondition {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a failure bound
		for {
			n, err := admin.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			var got *corev1.NodeCondition
			for i, c := range n.Status.Conditions {
				if c.Type == ConditionType {
					got = &n.Status.Conditions[i]
				}
			}
			if got != nil && got.Status == want && got.Reason == reason {
				if node == "c1" && (len(n.Status.Conditions) != 2 || !slices.ContainsFunc(n.Status.Conditions, func(c corev1.NodeCondition) bool { return c.Type == corev1.NodeReady })) {
					t.Errorf("conditions %+v: the kubelet's Ready condition should stay beside ours", n.Status.Conditions)
				}
				t.Logf("%s=%s %s: %s (transition %s, heartbeat %s)", got.Type, got.Status, got.Reason, got.Message, got.LastTransitionTime.UTC(), got.LastHeartbeatTime.UTC())
				return *got
			}
			if time.Now().After(deadline) {
				t.Fatalf("condition %+v, want %s %s", got, want, reason)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	r := reporter("c1")
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true, Routes: 3})
	c1 := wait("c1", corev1.ConditionTrue, ConditionConfigured)
	if c1.Message != "CNI config written" {
		t.Errorf("message %q", c1.Message)
	}

	// True with another reason: the transition time stays.
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true, Routes: 3, Errors: []nodeagent.StageError{{Stage: "catalog", Err: "catalog.yaml:3: bad"}}})
	c2 := wait("c1", corev1.ConditionTrue, ConditionCatalogStale)
	if !c2.LastTransitionTime.Equal(&c1.LastTransitionTime) || c2.LastHeartbeatTime.Equal(&c1.LastHeartbeatTime) {
		t.Errorf("same status: transition %s -> %s (want kept), heartbeat %s -> %s (want moved)", c1.LastTransitionTime, c2.LastTransitionTime, c1.LastHeartbeatTime, c2.LastHeartbeatTime)
	}
	// False: the transition time moves.
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true, Routes: 1, Errors: []nodeagent.StageError{{Stage: "routes", Err: "netlink: operation not permitted"}}})
	c3 := wait("c1", corev1.ConditionFalse, ConditionRoutesFailed)
	if c3.LastTransitionTime.Equal(&c2.LastTransitionTime) {
		t.Errorf("status flipped but the transition time stayed %s", c3.LastTransitionTime)
	}

	// No Node c0 yet: the patch fails and is retried until it appears.
	r0 := reporter("c0")
	r0.Report(nodeagent.Status{Configured: true, CNIWritten: true, Routes: 3})
	time.Sleep(300 * time.Millisecond)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c0"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	wait("c0", corev1.ConditionTrue, ConditionConfigured)

	// An agent that stops at start flushes its status without Run.
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "c2"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	r2 := NewConditionReporter(sa, "c2", slog.New(slog.DiscardHandler), now)
	if err := r2.Flush(ctx); err != nil {
		t.Errorf("Flush with nothing reported: %v", err)
	}
	r2.Report(nodeagent.Status{Errors: []nodeagent.StageError{{Stage: "catalog", Err: `Node "c2" has no label bridgehead.io/site`}}})
	if err := r2.Flush(ctx); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	if c := wait("c2", corev1.ConditionFalse, ConditionNotConfigured); !strings.Contains(c.Message, "has no label") {
		t.Errorf("c2's message %q", c.Message)
	}

	// The credential reaches no further: the status may be patched,
	// the Node itself not, nor the status replaced whole.
	refused := map[string]error{}
	_, refused["patch a Node's labels"] = sa.CoreV1().Nodes().Patch(ctx, "c1", types.MergePatchType, []byte(`{"metadata":{"labels":{"x":"y"}}}`), metav1.PatchOptions{})
	cur, _ := admin.CoreV1().Nodes().Get(ctx, "c1", metav1.GetOptions{})
	_, refused["update a Node's status"] = sa.CoreV1().Nodes().UpdateStatus(ctx, cur, metav1.UpdateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("node agent: %s: %v, want 403 Forbidden", what, err)
		}
	}
}

// TestConditionEvents: each new False reason is one Warning Event on the
// Node, NotConfigured excepted (the Source records those); a reason that
// stays makes no second Event, and one that comes back after a recovery
// makes another.
func TestConditionEvents(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e1"}})
	r := NewConditionReporter(client, "e1", slog.New(slog.DiscardHandler), nil)
	rec := record.NewFakeRecorder(20)
	r.Events = rec
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); r.Run(ctx) }()
	defer func() { cancel(); <-done }()
	forward := []nodeagent.StageError{{Stage: "forward", Err: "table ip filter chain FORWARD has policy drop"}}
	steps := []struct {
		st    nodeagent.Status
		event string // "" none
	}{
		{nodeagent.Status{Errors: []nodeagent.StageError{{Stage: "catalog", Err: "no site"}}}, ""},
		{nodeagent.Status{Configured: true, CNIWritten: true, Errors: forward}, "Warning ForwardBlocked table ip filter chain FORWARD has policy drop"},
		{nodeagent.Status{Configured: true, CNIWritten: true, Routes: 3, Errors: forward}, ""},
		{nodeagent.Status{Configured: true, CNIWritten: true, Errors: []nodeagent.StageError{{Stage: "bridge-netfilter", Err: "br_netfilter is not loaded"}}},
			"Warning BridgeNetfilterMissing br_netfilter is not loaded"},
		{nodeagent.Status{Configured: true, CNIWritten: true}, ""},
		{nodeagent.Status{Configured: true, CNIWritten: true, Errors: forward}, "Warning ForwardBlocked table ip filter chain FORWARD has policy drop"},
	}
	for i, s := range steps {
		r.Report(s.st)
		_, reason, _ := Condition(s.st)
		deadline := time.Now().Add(10 * time.Second) // a failure bound
		for {
			n, err := client.CoreV1().Nodes().Get(ctx, "e1", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if len(n.Status.Conditions) == 1 && n.Status.Conditions[0].Reason == reason {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("step %d: condition %+v, want reason %s", i, n.Status.Conditions, reason)
			}
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(50 * time.Millisecond) // the Event follows the patch
		var got []string
		for len(rec.Events) > 0 {
			got = append(got, <-rec.Events)
		}
		// FakeRecorder: "TYPE REASON MESSAGE"; the message is the
		// condition's, which holds the stage's error.
		switch {
		case s.event == "" && len(got) != 0:
			t.Errorf("step %d (%s): events %q, want none", i, reason, got)
		case s.event != "" && len(got) != 1:
			t.Errorf("step %d (%s): events %q, want one %q", i, reason, got, s.event)
		case s.event != "":
			f := strings.SplitN(s.event, " ", 3)
			if !strings.HasPrefix(got[0], f[0]+" "+f[1]+" ") || !strings.Contains(got[0], f[2]) {
				t.Errorf("step %d: event %q, want %q", i, got[0], s.event)
			}
		}
	}
}
