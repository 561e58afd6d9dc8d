// Package netpol enforces Kubernetes NetworkPolicy on every node, in the
// node agent, with nftables: its own table "inet bridgehead-netpol",
// beside the agent's "inet bridgehead-node" (SNAT), written whole in one
// netlink transaction.
//
// # The choice: a compiler to nftables sets and maps
//
// Two upstream pieces were weighed first.
//
// sigs.k8s.io/kube-network-policies v0.8.0 installs one nftables rule
// that sends the first packet of every new connection to or from a pod
// that a policy selects to userspace (nfqueue, "queue flags bypass to
// 100"). A Go callback parses the packet, looks both ends up in the pod
// informer's index and evaluates the policies against it
// (networkpolicy.go: evaluator, evaluateIngress/Egress, evaluatePorts),
// then sets the verdict. Per new connection that costs two context
// switches and a netlink round trip (tens of microseconds, its own
// packet_process_time histogram measures it), one goroutine is the
// single queue, and the failure mode is a choice between dropping every
// new connection when the agent stalls or restarts (fail closed), or
// letting every one through (--fail-open). Its library
// (pkg/networkpolicy) does build against our k8s.io v0.37.2 (checked:
// the Go module resolution takes our newer k8s.io and it compiles), but
// it is one Controller that owns the informers, the nfqueue socket and
// the table, not a compiler we could embed: taking it means taking its
// per-packet model, and with it 15 more modules in our binary
// (containerd/nri and ttrpc, wazero, grpc, gogo/protobuf, logrus,
// cri-api, network-policy-api, go-nfqueue, …). It writes its table
// through github.com/google/nftables, not knftables.
//
// sigs.k8s.io/knftables is a transaction builder that renders nft
// syntax and execs /usr/sbin/nft for every write. Our image is built
// from scratch and holds no nft binary (nor libnftables, libnftnl,
// libmnl, jansson and gmp it links), and the agent's SNAT table is
// already written over netlink with github.com/google/nftables.
//
// So this package compiles NetworkPolicy into nftables sets, verdict
// maps and chains itself (Compile: a pure function, table-tested), and
// writes them with github.com/google/nftables, the agent's existing
// dependency. The kernel decides every packet; no packet ever reaches
// userspace, and a stopped or restarting agent leaves the last table
// enforcing.
//
// # The table
//
//	table inet bridgehead-netpol {
//	  map ingress4 { type ipv4_addr : verdict; elements = { <local pod> : jump in-<hash> } }
//	  map ingress6, egress4, egress6 likewise (egress by source address)
//	  set a4-<hash> { flags interval; elements = { <peer addresses and ipBlocks> } }
//	  set n4-<hash> { type ipv4_addr . inet_proto . inet_service; <named ports> }
//	  chain forward { type filter hook forward priority filter; policy accept;
//	    ct state established,related accept
//	    meta nfproto ipv6 icmpv6 type 133-137 accept   # neighbour discovery
//	    ip saddr . ip daddr @self4 accept               # a pod to itself (its own Service)
//	    ip6 saddr . ip6 daddr @self6 accept
//	    ip saddr vmap @egress4
//	    ip6 saddr vmap @egress6
//	    ip daddr vmap @ingress4
//	    ip6 daddr vmap @ingress6
//	  }
//	  chain in-<hash> {      # one per distinct list of policies selecting a local pod
//	    ip saddr @a4-… meta l4proto tcp th dport 5432 counter name "allow-in-…" accept
//	    ip saddr @a4-… ip daddr . meta l4proto . th dport @n4-… counter name "allow-in-…" accept
//	    counter name "drop-in-<hash>" drop
//	  }
//	  chain eg-<hash> { … counter name "allow-eg-…" return (on to the ingress maps) … drop }
//	  counter allow-in-…, allow-eg-… (one per policy and direction), drop-… (one per chain)
//	}
//
// Only this node's pods are in the maps: each node enforces ingress and
// egress for its own pods, so traffic between two nodes is checked
// twice, egress at the source's node and ingress at the destination's.
// Peers are every pod of the cluster, on any node of any site: pod
// traffic between sites keeps its source address (the agent's SNAT rule
// exempts every cluster CIDR; TestSNATKeepsPodSource and
// TestSNATSparesEveryPodRange fail if that ever changes). The forward
// hook sees Service traffic after kube-proxy's DNAT (prerouting), so a
// policy holds on a ClusterIP's endpoint; and it sees traffic between
// pods on one bridge because the agent keeps br_netfilter's
// bridge-nf-call-ip(6)tables on (nodeagent.HostNet); the controller
// reads them back, warns when they are off, and exports
// bridgehead_netpol_bridge_netfilter{family}.
//
// A pod reaching itself through its own Service (kube-proxy sends the
// packet back to it, hairpin) is accepted whatever its policies: the
// API leaves a pod's traffic to itself alone, and the upstream suite
// expects it (AllowLoopback). The sets self4 and self6 hold each
// isolated local pod's address twice (saddr . daddr).
//
// Sets are named by their contents' hash: rules with the same peers (a
// default "allow from my namespace" repeated in a hundred policies)
// share one set. Chains are named by the hash of their policy list:
// pods selected by the same policies share one chain.
//
// # Cost per packet
//
// Packets of established connections (every packet but a connection's
// first, and replies) match the first rule: conntrack has already
// looked the connection up, so the table adds one rule. The first packet
// of a connection costs two hash lookups in the self sets and up to four
// verdict-map lookups (hash, O(1)); a
// packet to or from an isolated pod then walks that pod's chain: per
// rule of every policy selecting the pod, one interval-set lookup of the
// peer address (rbtree, O(log n)) and one compare of protocol and port,
// or one hash lookup of address . protocol . port for named ports. The
// cost grows with the rules of the policies that select the pod, never
// with the cluster's number of policies or pods. A packet of a pod no
// policy selects misses the maps and is accepted.
//
// # Cost per policy
//
// A policy that selects no pod of this node costs nothing in the table
// (its peers are not even resolved). One that does costs one rule per
// (ingress or egress rule × address family × numbered port), one more
// per rule with named ports, set elements for its peers (merged
// intervals: a namespace of consecutive pod addresses is one element)
// shared with every rule with the same peers, and one map element per
// address of each pod it selects. Every change recompiles the whole
// policy set from the informers' stores and, if the fingerprint changed,
// replaces the whole table in one transaction. Measured on this
// shared 2-core machine with `nice -n 19 go test -run XXX -bench
// 'Compile|Write' -benchtime 10x ./nodeagent/netpol/`, 1,000 policies
// over 10,000 pods (BenchmarkCompile, BenchmarkWrite). Other work kept
// the load average between 9 and 17, so wall times spread by a factor
// of two to five between runs; the CPU time per operation (user and
// system, the kernel's share of a write included) is the steadier
// figure:
//
//	                        compile            write (netlink, kernel)
//	                        CPU     wall       CPU     wall
//	a node (100 pods)       36 ms   35–110 ms   67 ms   75–190 ms
//	all 10,000 pods local  124 ms  110–700 ms  761 ms  1.1–1.5 s
//
//	                        chains  rules  sets  set elements  map elements
//	a node (100 pods)          200   1020    26           715           400
//	all 10,000 pods local     1080   5870  1026         22715         40000
//
// docs/concepts/network-policy.md ("Cost") has the later figures: throughput and
// connection rate through a node with the table loaded
// (BenchmarkThroughput), the compiler state's memory
// (BenchmarkCompilerMemory), the size of `nft list ruleset` and what the
// named verdict counters cost (BenchmarkWrite).
//
// Writing costs some 50 µs a rule and 125 µs a verdict-map element
// (the kernel validates each jump); a change therefore takes 0.1–0.3 s
// to apply on a node of 100 pods, coalesced over DefaultDebounce
// (250 ms). Any pod's change anywhere may change the peers, so under a
// constant churn the node compiles at most four times a second (a
// seventh of a core at 10,000 pods) and writes only when the result
// differs.
// Established connections never notice a write: conntrack is outside
// the table, and the first rule of the new table accepts them.
//
// # Watching every pod: the cost at 10,000 nodes
//
// Peers may be any pod of the cluster, so every agent watches every Pod
// (with Namespaces and NetworkPolicies, which are few). The informer's
// transform (StripPod) turns each into a Pod of this package that holds
// labels, namespace, addresses, named container ports, node name and
// phase: about 800 bytes a pod in the store, where even a modest full
// corev1.Pod takes 3.9 KB (BenchmarkStoreMemory), so 300,000 pods
// (10,000 nodes × 30) cost an agent some 240 MB.
//
// The transform runs in the agent, after decoding: the API servers
// still send each agent every Pod change whole (some 4 KB), and a status
// change the compiler ignores (readiness, restarts) reaches every node
// too, though Controller.updated drops it before any compile. At 10,000
// nodes, a churn of 1 % of 300,000 pods a minute is 3,000 updates a
// minute, fanned out to 10,000 watchers: some 500,000 watch events a
// second and 2 GB/s leaving the API servers' watch caches, and a full
// list at each agent restart is 300,000 pods × 4 KB = 1.2 GB. That is
// why the watch is the right design up to a few thousand nodes (where
// kube-network-policies and Calico without Typha pay the same) and not
// at 10,000: there, the fan-out must leave the API servers, through a
// Typha-like proxy or a slim per-pod object (address, labels, named
// ports) that the controller publishes, as Cilium does with
// CiliumEndpoints. EndpointSlices would not do: they list only the pods
// behind a Service, and peers are any pod.
//
// # Limits
//
//   - Traffic from the node itself to its pods (kubelet probes) passes
//     the output hook, not forward: it is always allowed, as the
//     NetworkPolicy API requires. A pod's egress to its own node's
//     addresses (input hook) is not filtered.
//   - kube-proxy in IPVS mode sends Service traffic through the local
//     output path, not forward: not covered (iptables and nftables modes
//     are).
//   - Named ports never match ipBlock peers (a CIDR has no container
//     ports), as upstream.
//   - A pod is isolated once its address is in the API and the table is
//     written (debounce, compile and write, well under a second on a
//     node); its first packets may come earlier.
//   - The periodic check (RepairInterval) compares the fingerprint in
//     the base chain: a table deleted or replaced is written again; an
//     element or rule edited by hand inside it stays until the next
//     change of the policies, pods or namespaces rewrites the table.
//   - Policies whose selectors do not parse are left out and counted
//     (bridgehead_netpol_ruleset{kind="invalid_policies"}); the API
//     server refuses them, so this is defence only.
//
// # RBAC
//
// The agent's ServiceAccount needs list and watch on pods and
// namespaces (core) and networkpolicies (networking.k8s.io), cluster
// wide; nothing else (TestRealAPIServer runs with exactly that).
//
// # Metrics and logs
//
// bridgehead_netpol_verdicts_total{direction, verdict=allowed|dropped,
// policy}: the packets each policy allowed, and those dropped because
// the pod is isolated by the policies named (comma-separated) and none
// allowed them, read from the table's named counters at each scrape and
// carried across rewrites (only the first packets of new connections
// reach the policies). Beside it, on the registry passed in:
// bridgehead_netpol_syncs_total{result},
// bridgehead_netpol_sync_seconds{stage=compile|write},
// bridgehead_netpol_ruleset{kind}, bridgehead_netpol_enforcing (1 once
// a table from the synced view is written),
// bridgehead_netpol_last_write_timestamp_seconds,
// bridgehead_netpol_repairs_total and
// bridgehead_netpol_bridge_netfilter{family}. Options.OnEnforcing
// fires once the first table is written: the node agent then ends its
// Node condition's message in "network policy: enforced", which
// `bridgehead verify --collect` (verify/kubenetpol) reads on every Node
// when NetworkPolicies exist. Each write logs one line
// with the ruleset's size and the compile and write times; the
// controller logs its state changes (waiting, synced, table not
// written, bridge unfiltered); nothing is logged per packet.
package netpol
