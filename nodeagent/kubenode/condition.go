package kubenode

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/nodeagent"
)

// ConditionType is the condition the agent keeps on its Node: True when
// the node's pod network is in place (CNI config written, routes and SNAT
// table installed), False with the failing stage's reason otherwise.
const ConditionType corev1.NodeConditionType = "BridgeheadNodeNetwork"

// Reasons of the condition.
const (
	ConditionConfigured    = "Configured"    // True: everything in place
	ConditionCatalogStale  = "CatalogStale"  // True: in place, but a newer catalog did not load
	ConditionNotConfigured = "NotConfigured" // False: no model yet (no site, no pod range, bad catalog)
	ConditionCNINotWritten = "CNINotWritten" // False: no CNI config yet
	ConditionCNIFailed     = "CNIFailed"     // False: writing the CNI config or plugins failed
	ConditionRoutesFailed  = "RoutesFailed"  // False: installing routes failed
	ConditionSNATFailed    = "SNATFailed"    // False: writing the nftables table failed
	// False: br_netfilter missing or its bridge-nf-call sysctls not 1
	// (pod -> Service -> pod on the same node fails).
	ConditionBridgeNetfilter = "BridgeNetfilterMissing"
	// False: a forward chain of the host's firewall drops pod traffic.
	ConditionForwardBlocked = "ForwardBlocked"
)

// maxMessage bounds the condition's message (errors can be long).
const maxMessage = 1024

// Condition is the condition's status, reason and message for a Status.
// The message holds nothing that changes while the node is healthy (not
// the route count, which grows with every node that joins the site): a
// condition rewritten on each join would make one join a write per
// Node, each sent to every watcher of Nodes. The count is in
// bridgehead_node_routes_installed.
func Condition(st nodeagent.Status) (corev1.ConditionStatus, string, string) {
	st.Routes = -1
	msg := st.String()
	if len(msg) > maxMessage {
		msg = msg[:maxMessage-3] + "..."
	}
	failed := map[string]bool{}
	for _, e := range st.Errors {
		failed[e.Stage] = true
	}
	switch {
	case !st.Configured:
		return corev1.ConditionFalse, ConditionNotConfigured, msg
	case failed["cni"]:
		return corev1.ConditionFalse, ConditionCNIFailed, msg
	case !st.CNIWritten:
		return corev1.ConditionFalse, ConditionCNINotWritten, msg
	case failed["routes"]:
		return corev1.ConditionFalse, ConditionRoutesFailed, msg
	case failed["snat"]:
		return corev1.ConditionFalse, ConditionSNATFailed, msg
	case failed["forward"]:
		return corev1.ConditionFalse, ConditionForwardBlocked, msg
	case failed["bridge-netfilter"]:
		return corev1.ConditionFalse, ConditionBridgeNetfilter, msg
	case failed["catalog"]:
		return corev1.ConditionTrue, ConditionCatalogStale, msg
	}
	return corev1.ConditionTrue, ConditionConfigured, msg
}

// DefaultConditionRetry is how long the reporter waits after a failed
// patch before it tries again.
const DefaultConditionRetry = 10 * time.Second

// DefaultConditionResync is how often the reporter writes the condition
// even though nothing changed: it puts back a condition someone removed
// and moves lastHeartbeatTime.
const DefaultConditionResync = 10 * time.Minute

// ConditionReporter keeps the ConditionType condition on one Node,
// patching nodes/status (a strategic merge of that one condition: the
// kubelet's conditions stay as they are). With Events set, each new
// False reason written (NotConfigured excepted: the Source records its
// own Events for it) is also a Warning Event on the Node, its reason the
// condition's, so `kubectl describe node` says what broke and when. Report may be called from any
// goroutine and never blocks; Run patches from its own goroutine, only
// when the status, reason or message changed or every Resync, and retries
// a failed patch after Retry. Set Retry and Resync before Run. pending is
// guarded by mu.
type ConditionReporter struct {
	client kubernetes.Interface
	node   string
	log    *slog.Logger
	now    func() time.Time
	// Retry is the wait after a failed patch (DefaultConditionRetry).
	Retry time.Duration
	// Resync is the period of unconditional writes (DefaultConditionResync).
	Resync time.Duration
	// Events, when set, records the Warning Events.
	Events record.EventRecorder
	wake   chan struct{}

	mu      sync.Mutex
	pending *nodeagent.Status
	policy  string // NetworkPolicy* state, "" before any (condition_netpol.go)
	skipped string // catalog entries skipped, "" for none (condition_skipped.go)
}

// NewConditionReporter reports on Node node; now is the clock of the
// condition's times (time.Now when nil).
func NewConditionReporter(client kubernetes.Interface, node string, log *slog.Logger, now func() time.Time) *ConditionReporter {
	if now == nil {
		now = time.Now
	}
	return &ConditionReporter{client: client, node: node, log: log, now: now, Retry: DefaultConditionRetry, Resync: DefaultConditionResync, wake: make(chan struct{}, 1)}
}

// Report hands over the agent's latest Status (nodeagent.Options.Status).
func (r *ConditionReporter) Report(st nodeagent.Status) {
	r.set(func() { r.pending = &st })
}

// set runs f, which writes the fields Run reads, under mu, then wakes
// Run. Any goroutine; never blocks (wake holds one).
func (r *ConditionReporter) set(f func()) {
	r.mu.Lock()
	f()
	r.mu.Unlock()
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run patches the condition until ctx ends.
func (r *ConditionReporter) Run(ctx context.Context) {
	var last corev1.NodeCondition // what the Node holds, as far as we know
	var retry <-chan time.Time
	failing := false
	warned := "" // the False reason last recorded as an Event
	resync := time.NewTicker(r.Resync)
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.wake:
		case <-retry:
		case <-resync.C:
			last = corev1.NodeCondition{}
		}
		retry = nil
		r.mu.Lock()
		st, policy, skipped := r.pending, r.policy, r.skipped
		r.mu.Unlock()
		if st == nil {
			continue
		}
		status, reason, msg := Condition(*st)
		msg = message(msg, skipped, policy)
		if last.Status == status && last.Reason == reason && last.Message == msg {
			continue
		}
		c, err := r.patch(ctx, status, reason, msg)
		if err != nil {
			if !failing {
				r.log.Warn("node condition not written", "node", r.node, "condition", ConditionType, "err", err, "retry", r.Retry)
				failing = true
			}
			retry = time.After(r.Retry)
			continue
		}
		if c.Status == corev1.ConditionFalse && c.Reason != ConditionNotConfigured && c.Reason != warned && r.Events != nil {
			r.Events.Event(&corev1.ObjectReference{Kind: "Node", Name: r.node, APIVersion: "v1"}, corev1.EventTypeWarning, c.Reason, c.Message)
		}
		if c.Status == corev1.ConditionFalse {
			warned = c.Reason
		} else {
			warned = ""
		}
		if failing || last.Status != c.Status {
			r.log.Info("node condition", "node", r.node, "condition", ConditionType, "status", c.Status, "reason", c.Reason, "message", c.Message)
		}
		failing = false
		last = c
	}
}

// Flush writes the latest reported status now, on the caller's
// goroutine: for an agent that stops at start (no model), whose Run loop
// would not get to it. Nothing reported: nothing written.
func (r *ConditionReporter) Flush(ctx context.Context) error {
	r.mu.Lock()
	st, policy, skipped := r.pending, r.policy, r.skipped
	r.mu.Unlock()
	if st == nil {
		return nil
	}
	status, reason, msg := Condition(*st)
	_, err := r.patch(ctx, status, reason, message(msg, skipped, policy))
	return err
}

// patch writes the condition, keeping its lastTransitionTime when the
// Node's condition already has this status.
func (r *ConditionReporter) patch(ctx context.Context, status corev1.ConditionStatus, reason, msg string) (corev1.NodeCondition, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	now := metav1.NewTime(r.now())
	c := corev1.NodeCondition{Type: ConditionType, Status: status, Reason: reason, Message: msg,
		LastHeartbeatTime: now, LastTransitionTime: now}
	n, err := r.client.CoreV1().Nodes().Get(ctx, r.node, metav1.GetOptions{})
	if err != nil {
		return c, fmt.Errorf("get Node %q: %w", r.node, err)
	}
	for _, old := range n.Status.Conditions {
		if old.Type == ConditionType && old.Status == status && !old.LastTransitionTime.IsZero() {
			c.LastTransitionTime = old.LastTransitionTime
		}
	}
	body, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{c}}})
	if err != nil {
		return c, err
	}
	if _, err := r.client.CoreV1().Nodes().PatchStatus(ctx, r.node, body); err != nil {
		return c, fmt.Errorf("patch Node %q status: %w", r.node, err)
	}
	return c, nil
}
