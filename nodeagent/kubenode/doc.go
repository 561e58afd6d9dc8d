// Package kubenode is the Kubernetes source of the node agent's model
// (`bridgehead node --kubernetes`).
//
// # Where the model comes from
//
// The node reads exactly what the gateways read: the catalog the
// controller publishes (package kube/catalog), through the same follower
// (package kube/follow), into a catalog file on the host
// (/var/lib/bridgehead/catalog.yaml, a hostPath). That file is parsed and
// checked as a catalog (config.ParseSites, config.Check: a follower
// writes nothing that fails them), and nodeagent.FromConfig builds the
// model from it, as in file mode. So:
//
//   - Nothing is made by hand: a new Site or node reaches every agent
//     when the controller publishes it; the operator renders no catalog.
//   - One source of truth: the node's own pod range and its neighbours'
//     are the allocator's records as the controller publishes them (the
//     annotation bridgehead.io/pod-cidrs), never spec.podCIDRs read on
//     one side and the annotation on the other.
//   - The controller's plan already left out bad Nodes one by one; the
//     agent never runs an all-or-nothing check over the cluster's Nodes,
//     so one bad Node cannot freeze every agent.
//   - An offline cache: the catalog file stays on the host (hostPath).
//     After a reboot with the API server away, the agent applies it at
//     once, before any informer has synced: routes and SNAT come back
//     with the CNI config, not later.
//   - Cheap at scale: the agent watches its own Node (a field selector
//     on its name) for its site label, the catalog's base ConfigMap and
//     its own site's index and node slices; never every Node of the
//     cluster. A join rewrites one slice and the index of its site, never
//     the base (kube/catalog), so it reaches the agents of that site
//     only: the other sites' agents receive nothing and decode nothing. The caches
//     hold no more than the agent reads: its Node's name, UID and labels
//     (transformNode drops the kubelet's status and managedFields), and
//     the catalog ConfigMaps without managedFields (kube/follow).
//
// # Waiting, never exiting
//
// Until the controller has labelled the Node with its site and published
// its pod range, Load fails with the reason, and the agent (nodeagent.Run)
// waits and tries again. Each new reason is one Warning Event on the
// Node (BridgeheadNodeNotConfigured, "NoSite: ...", "NotPublished: ..."),
// and one Normal Event when it is configured. ConditionReporter
// (condition.go) keeps the Node condition BridgeheadNodeNetwork from the
// agent's Status.
//
// Kubernetes types stay here: package nodeagent never sees them.
package kubenode
