// Package kubenetpol is verify's NetworkPolicy check: when the cluster
// holds NetworkPolicies, does every node's agent enforce them? A policy
// the API server accepted and no node enforces is worse than a refusal:
// the operator believes the database is closed.
//
// Each node agent says so in its own Node condition, BridgeheadNodeNetwork
// (the only part of its Node it may write: deploy/kubernetes/
// node-admission.yaml), whose message ends in "network policy: STATE"
// (nodeagent/kubenode condition_netpol.go). A node whose condition lacks
// that part runs an agent older than the enforcement; one without the
// condition, or whose condition the agent has not refreshed for
// StaleAfter, runs no agent of ours.
//
// The check lists NetworkPolicies (all namespaces) and Nodes: `bridgehead
// verify --collect` runs it with the operator's credential.
package kubenetpol

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/nodeagent/kubenode"
	"github.com/bridgehead/bridgehead/verify"
)

// StaleAfter: a condition whose heartbeat is older was left by an agent
// that no longer runs (agents rewrite it every
// kubenode.DefaultConditionResync).
const StaleAfter = 3 * kubenode.DefaultConditionResync

// CheckName is the check's name in the report.
const CheckName = "network policy"

// why a node does not enforce, and the fix, in the order reported.
var causes = []struct{ key, what, fix string }{
	{"none", "no bridgehead node agent reports on", "is the bridgehead-node DaemonSet scheduled there (kubectl -n kube-system get ds bridgehead-node -o wide)?"},
	{"stale", "the node agent stopped reporting (condition older than " + StaleAfter.String() + ") on", "kubectl -n kube-system get pods -l app.kubernetes.io/name=bridgehead,app.kubernetes.io/component=node -o wide: is its pod running there?"},
	{"old", "the node agent predates NetworkPolicy enforcement on", "upgrade the bridgehead-node DaemonSet's image (deploy/kubernetes/node-daemonset.yaml)"},
	{"off", "the node agent runs with --network-policy=false on", "remove --network-policy=false from the bridgehead-node DaemonSet's args, unless another NetworkPolicy engine enforces policies on these nodes"},
	{"waiting", "the node agent has not written its policy table on", "its log says why (kubectl -n kube-system logs ds/bridgehead-node | grep 'network policy'); it needs list and watch on pods, namespaces and networkpolicies (deploy/kubernetes/node-rbac.yaml)"},
}

// Check lists the cluster's NetworkPolicies and Nodes and reports: SKIP
// when there is no policy, PASS when every Node's agent enforces, FAIL
// naming the nodes that do not (at most five per cause), why, and the
// fix. now is the clock of the staleness test.
func Check(ctx context.Context, client kubernetes.Interface, now time.Time) verify.Check {
	chk := verify.Check{Name: CheckName, Target: "cluster"}
	pols, err := client.NetworkingV1().NetworkPolicies(metav1.NamespaceAll).List(ctx, metav1.ListOptions{})
	if err != nil {
		chk.Result, chk.Detail = verify.Fail, fmt.Sprintf("cannot list NetworkPolicies: %v", err)
		return chk
	}
	if len(pols.Items) == 0 {
		chk.Result, chk.Detail = verify.Skip, "no NetworkPolicy in the cluster"
		return chk
	}
	nodes, err := client.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		chk.Result, chk.Detail = verify.Fail, fmt.Sprintf("%d NetworkPolicies, and the Nodes cannot be listed to see who enforces them: %v", len(pols.Items), err)
		return chk
	}
	by := map[string][]string{}
	for i := range nodes.Items {
		if c := cause(&nodes.Items[i], now); c != "" {
			by[c] = append(by[c], nodes.Items[i].Name)
		}
	}
	bad := 0
	var details []string
	for _, c := range causes {
		names := by[c.key]
		if len(names) == 0 {
			continue
		}
		bad += len(names)
		slices.Sort(names)
		list := strings.Join(names[:min(len(names), 5)], ", ")
		if len(names) > 5 {
			list += fmt.Sprintf(" and %d more", len(names)-5)
		}
		details = append(details, fmt.Sprintf("%s %s: %s", c.what, list, c.fix))
	}
	n := len(nodes.Items)
	if bad == 0 {
		chk.Result, chk.Figure = verify.Pass, fmt.Sprintf("%d policies, enforced on %d of %d nodes", len(pols.Items), n, n)
		return chk
	}
	chk.Result = verify.Fail
	chk.Figure = fmt.Sprintf("%d policies, not enforced on %d of %d nodes", len(pols.Items), bad, n)
	chk.Detail = "pods there are not isolated by the policies that select them; " + strings.Join(details, "; ")
	return chk
}

// cause is why n's agent does not enforce ("" when it does).
func cause(n *corev1.Node, now time.Time) string {
	for _, c := range n.Status.Conditions {
		if c.Type != kubenode.ConditionType {
			continue
		}
		if !c.LastHeartbeatTime.IsZero() && now.Sub(c.LastHeartbeatTime.Time) > StaleAfter {
			return "stale"
		}
		state, ok := kubenode.NetworkPolicyState(c.Message)
		switch {
		case !ok:
			return "old"
		case state == kubenode.NetworkPolicyEnforced:
			return ""
		case state == kubenode.NetworkPolicyOff:
			return "off"
		}
		return "waiting"
	}
	return "none"
}

// Report is a report of the one check c, its counts set.
func Report(c verify.Check) *verify.Report {
	r := &verify.Report{Checks: []verify.Check{c}}
	switch c.Result {
	case verify.Pass:
		r.Passed = 1
	case verify.Fail:
		r.Failed = 1
	case verify.Skip:
		r.Skip = 1
	}
	return r
}
