package kubenode

import "strings"

// The node agent advertises whether it enforces NetworkPolicy in its own
// Node condition (BridgeheadNodeNetwork: the only part of its Node the
// admission policy bridgehead-node-agent-own-condition lets it write) as
// the last part of the message, "network policy: STATE".
// `bridgehead verify --collect` (verify/kubenetpol) reads it on every
// Node when NetworkPolicies exist: an agent whose message lacks it is
// older than the enforcement, or not ours.
const (
	// NetworkPolicyPrefix starts the part; the state follows.
	NetworkPolicyPrefix = "network policy: "
	// NetworkPolicyEnforced: the table from the synced API view is
	// written (bridgehead_netpol_enforcing 1).
	NetworkPolicyEnforced = "enforced"
	// NetworkPolicyWaiting: enforcement is on but its informers have
	// not synced or its table is not written yet.
	NetworkPolicyWaiting = "waiting for the policy table"
	// NetworkPolicyOff: --network-policy=false (another engine, or none).
	NetworkPolicyOff = "off (--network-policy=false)"
)

// ReportNetworkPolicy hands over the enforcement state (one of the
// NetworkPolicy* states); the condition is rewritten with it. Any
// goroutine; never blocks.
func (r *ConditionReporter) ReportNetworkPolicy(state string) {
	r.set(func() { r.policy = state })
}

// withNetworkPolicy appends the state to a condition message, within
// maxMessage (the message before it is cut, not the state).
func withNetworkPolicy(msg, state string) string { return message(msg, "", state) }

// NetworkPolicyState is the state a condition message advertises, and
// false when it advertises none (an agent older than the enforcement).
func NetworkPolicyState(msg string) (string, bool) {
	i := strings.LastIndex(msg, NetworkPolicyPrefix)
	if i < 0 {
		return "", false
	}
	return msg[i+len(NetworkPolicyPrefix):], true
}
