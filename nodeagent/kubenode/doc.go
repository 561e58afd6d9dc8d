// Package kubenode is the Kubernetes source of the node agent's model
// (`bridgehead node --kubernetes`).
//
// # Where the model comes from
//
// The node reads exactly what the gateways read: the catalog the
// controller publishes (package kube/catalog), through the same follower
// (package kube/follow), into a catalog file on the host
// (/var/lib/bridgehead/catalog.yaml, a hostPath). That file is parsed and
// checked for what this node installs (config.ParseSites,
// nodeagent.CheckCatalog: a follower writes nothing that fails them; see
// below), and nodeagent.FromConfig builds the model from it, as in file
// mode. So:
//
//   - Nothing is made by hand: a new Site or node reaches every agent
//     when the controller publishes it; the operator renders no catalog.
//   - One source of truth: the node's own pod range and its neighbours'
//     are the allocator's records as the controller publishes them (the
//     annotation bridgehead.io/pod-cidrs), never spec.podCIDRs read on
//     one side and the annotation on the other.
//   - One bad entry cannot freeze every agent: the agent checks what it
//     installs, and skips the rest (below).
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
//     the catalog ConfigMaps without managedFields (kube/follow). Its
//     clientset leaves ContentType unset, so client-go asks for
//     protobuf for Nodes, ConfigMaps and the NetworkPolicy informers'
//     Pods, Namespaces and NetworkPolicies, as the controller's does
//     (measured for the controller: BenchmarkNodeSyncProtobuf, in
//     controller/doc.go; not measured for the agent).
//
// # What the agent checks: what it installs
//
// The agent does not run config.Check over the whole catalog all or
// nothing, as a gateway does. It runs config.CheckNode
// (nodeagent.CheckCatalog, which file mode's nodeagent.FileSource runs
// too): Check's rules, unchanged, over the whole catalog, each problem
// then sorted by the entry its field names.
//
//   - Refused whole: its own Node's entry, anything of its own site (its
//     CIDRs, gateways and router addresses are its next hops), the node
//     and pod CIDRs of every other site (the aggregates it routes toward
//     its gateways and keeps unmasqueraded) and the service CIDRs. The
//     follower does not write such a catalog (bridgehead_follow_refused_total
//     {state="refused"}, a log line naming each file, line and field); the
//     catalog file on the host, and so the model, stay the last good ones.
//   - Skipped: another node's entry (of its own site too: the route to
//     that node's pod block is left out, the other nodes' routes are
//     installed) and everything else of another site (its gateways,
//     router addresses, hubs, policy), which the agent does not install.
//     Skipped entries are counted in bridgehead_node_catalog_skipped_entries,
//     logged once each time the set changes (a Warning line with the
//     first problems), and named in the Node condition's message as a
//     warning ("warning: N catalog entries skipped ..., first FIELD:
//     PROBLEM"; Options.Skipped, ConditionReporter.ReportSkipped); the
//     condition stays True.
//
// Why this line: an agent installs its own pod block and SNAT, a route to
// each other node of its site, and the other sites' aggregates via its
// site's gateways; nothing else of the catalog reaches the host. A bad
// entry elsewhere changes nothing else it installs, so refusing the
// catalog for it only stopped the agents from taking joins (bench/scale once
// saw one out-of-pool block refuse a whole site's catalog: 273517d).
// The route to a bad node is left out rather than installed: an
// out-of-pool block routed to a node would take traffic from the site
// that owns the pool. A problem with what it installs is refused whole,
// as before, because a half-applied own site is worse than the last good
// one. Check itself is not changed, and a gateway still refuses a bad
// catalog whole: it carries every site's traffic, so a catalog it cannot
// trust is not one it may apply in part. The controller's plan already
// leaves out bad Nodes and Sites one by one (controller/plan.go), so a
// skip here means a publication the plan did not make (an older
// controller, or one made by hand, as bench/scale's). The agent's service
// CIDRs, which only it knows, can still refuse a catalog the plan
// accepted: they are what it keeps unmasqueraded. Problems ParseSites
// finds (names, keys) still refuse the catalog whole: they are decoding
// errors, which the plan never lets through.
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
