package kubenode

import (
	"context"
	"log/slog"

	"github.com/google/nftables"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/nodeagent/netpol"
)

// NetworkPolicyOptions are the dependencies of NetworkPolicy.
type NetworkPolicyOptions struct {
	// Client lists and watches pods, namespaces and networkpolicies
	// cluster-wide (list and watch only: see package netpol).
	Client   kubernetes.Interface
	Node     string
	Log      *slog.Logger
	Registry prometheus.Registerer
	// Report, when set, hears the enforcement state (NetworkPolicy*
	// states of condition_netpol.go), for the Node condition.
	Report func(state string)
}

// NetworkPolicy enforces the cluster's NetworkPolicies on this node's
// pods (package netpol: the nftables table inet bridgehead-netpol)
// until ctx ends. Disabled, it removes the table a previous run left,
// so that turning enforcement off never leaves stale rules behind, and
// returns.
func NetworkPolicy(ctx context.Context, o NetworkPolicyOptions, enabled bool) error {
	table := netpol.NewTable(nftables.New)
	report := func(state string) {
		if o.Report != nil {
			o.Report(state)
		}
	}
	if !enabled {
		o.Log.Info("network policy: not enforced (--network-policy=false)", "table", "inet "+netpol.TableName)
		report(NetworkPolicyOff)
		return table.Remove()
	}
	report(NetworkPolicyWaiting)
	c, err := netpol.New(netpol.Options{Client: o.Client, Node: o.Node, Writer: table, Log: o.Log, Registry: o.Registry,
		OnEnforcing: func() { report(NetworkPolicyEnforced) }})
	if err != nil {
		return err
	}
	return c.Run(ctx)
}

// RemoveNetworkPolicyTable deletes the policy table (uninstall).
func RemoveNetworkPolicyTable() error { return netpol.NewTable(nftables.New).Remove() }
