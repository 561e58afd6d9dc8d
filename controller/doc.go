// Package controller is `bridgehead controller`: it assigns Nodes to
// Sites and gives them pod blocks.
//
// # Shape
//
// client-go shared informers watch Nodes, Sites and Gateways (never a
// poll). Their handlers add keys to two rate-limited workqueues, one of
// node names and one of site names. Reconciles are level-triggered: a
// worker reads the object from the informer's cache and makes the world
// match, whatever event woke it, so running one twice does no harm.
//
// Only the leader of a coordination.k8s.io Lease (client-go's
// leaderelection) runs workers. Every replica runs the informers, so a
// standby has warm caches and takes over with one List. A Controller
// leads at most once: when it loses the lease, Run returns and the
// process exits (the Deployment restarts it as a standby).
//
// # Handing over
//
//   - Stop (SIGTERM: kubectl delete pod, a rolling update): the workers
//     start nothing new, the reconciles in flight finish their API calls
//     (a request the client abandons may still be applied by the server),
//     and only then is the Lease released (client-go's ReleaseOnCancel
//     would release it while the workers still ran). The standby takes it
//     at its next try: client-go waits RetryPeriod to 2.2 RetryPeriod
//     between tries (TestKubeTakeover, 10 stops with a 0.5 s retry: p50
//     0.40 s, max 0.68 s; the command is under "Measured" below).
//   - Crash (SIGKILL, a node lost): the Lease stays held, and client-go's
//     standby takes it once it has seen no renewal for LeaseDuration. It
//     polls the Lease every RetryPeriod to 2.2 RetryPeriod (jittered),
//     dates the last renewal by its own clock when a poll first returns a
//     changed record, and tries to take the Lease at its first poll after
//     that date + LeaseDuration. It never reads the holder's clock.
//     client-go's LeaseLock compares records at the JSON precision of
//     their times (seconds), which missed renewals within one second and
//     let a standby act up to 1 s early; microLeaseLock (lease.go) makes
//     every renewal a change. So, with the kill at K, the takeover comes
//     after the last renewal stored + LeaseDuration (the lease is over)
//     and before K + LeaseDuration + 2 x 2.2 RetryPeriod + the requests'
//     time (one poll to see the last renewal, one to act after the expiry;
//     TestKubeTakeover checks both, see takeoverBound). "Within the lease
//     duration" counted from the kill is out of reach for any standby that
//     does not trust the holder's clock: a kill just after a renewal
//     leaves the whole LeaseDuration from when the standby sees it, which
//     is later. The retry period is what is left to choose: the binary's
//     defaults are 15 s, 10 s and 0.5 s, so a crash is taken over within
//     15 s + 2.2 s + the requests (the leader writes the Lease twice a
//     second; the Kubernetes default 2 s retry would allow 15 s + 8.8 s).
//     Measured (TestKubeTakeover, 10 kills at a random moment between
//     renewals): 15 s, 10 s, 0.5 s: kill -> takeover p50 15.86 s, max
//     16.25 s; 4 s, 2 s, 0.5 s: p50 5.04 s, max 5.43 s. Commands:
//     `BRIDGEHEAD_TAKEOVER_DEFAULTS=1 BRIDGEHEAD_TAKEOVER_RUNS=10 go test
//     -run 'TestKubeTakeover$' -v -timeout 30m ./controller/` for the
//     binary's defaults, the same without BRIDGEHEAD_TAKEOVER_DEFAULTS for
//     4 s, 2 s, 0.5 s.
//     The failover ends when the new leader has rebuilt its allocator
//     (a List of every Node from the API server) and reconciled, once,
//     every Node it knew at the takeover: it logs "first full reconcile
//     done" and sets bridgehead_controller_first_reconcile_seconds
//     (from the start of its lead). TestKubeFailoverScale measures it at
//     10,000 nodes; see "Scale" below.
//     A leader that cannot renew stops at RetryPeriod + RenewDeadline
//     after its last renewal and lets a reconcile in flight finish for at
//     most LeaseDuration - RenewDeadline - RetryPeriod - 1 s
//     (drainTimeout), so it has stopped writing before a standby may act.
//
// # Allocation state
//
// The ipam.Allocator holds which node has which block. On becoming leader,
// after the caches have synced and before any worker starts, the
// controller lists Nodes from the API server (a consistent read, not the
// cache, so a write of the previous leader that the cache has not seen yet
// still counts), and rebuilds the allocator from the blocks they record:
// the annotation bridgehead.io/pod-cidrs first, else spec.podCIDRs, oldest
// Node first.
//
// A deleted Node's blocks stay out of the pool for --release-grace, and
// no Node records them any more, so the leader records them in
// ConfigMaps of --namespace labelled bridgehead.io/releases (one line per
// node: node, site, when the grace ends, blocks), written by one worker
// when a delete starts a grace, no sooner than --catalog-interval (1 s)
// after its last write, so a burst of deletes makes one write
// (TestKubeReleaseWritesCoalesced: 40 deletes over 3 s, 4 writes), and
// once more when the lead stops.
// The lines are sharded by a hash of the node's name over
// bridgehead-releases, bridgehead-releases-1, ...: a power of two of
// them, the fewest that keep each under 512 KiB (the API server refuses a
// ConfigMap over 1 MiB), so a delete rewrites one shard and a line moves
// only when their number doubles or halves; see releases.go for why a
// leader stopped mid-write loses no line. About 100 bytes a node (an AKS
// name, two blocks): 12,000 nodes in their grace are 1.23 MB, 4 shards
// (TestKubeReleasesSharded). After the
// rebuild, a new leader reads them and keeps those blocks out of the pool
// until the grace that began with the delete ends (ipam.Restore); a node
// of the same name that comes back within it gets its blocks again. Lines
// whose grace is over are ignored and dropped at the next write. The
// times are wall-clock times of the leader that wrote them: clock skew
// between the replicas' hosts shortens or lengthens the grace by as much.
// A Node deleted while no replica leads (or before the last leader
// recorded it) is in no line, but the published catalog still lists it:
// the rebuild starts a grace, from then, for every catalog node that no
// Node matches (the sites' indexes name the slices; decoding every slice
// takes about 0.2 s at 10,000 nodes: `go test -run XXX -bench
// BenchmarkAssemble ./kube/catalog/`).
//
// # Node → site → blocks (reconcileNode)
//
//   - The node's InternalIPs (IPv4 and/or IPv6) are matched against the
//     node CIDRs of the valid Sites. No match or matches in two Sites: a
//     Warning Event, the Node condition BridgeheadSite=False with the
//     reason, the unassigned-nodes metric, and no pod range.
//   - One site: the label bridgehead.io/site=<site>; the node's recorded
//     blocks are adopted when they are blocks of the site's pool (problems
//     are Events); missing families are allocated; the annotation
//     bridgehead.io/pod-cidrs records the blocks ("10.1.4.0/24,fd00:1::/80",
//     the site's first family first), and spec.podCIDR(s) are written when
//     empty, as kube-controller-manager's range allocator does. A node
//     whose spec.podCIDRs lie outside the pool keeps them (they are
//     immutable) and the annotation holds its bridgehead block: the node
//     side reads the annotation.
//   - A node that already has a range keeps it: see "A live node's range
//     never changes" below.
//   - A deleted node's blocks return to the pool after --release-grace.
//
// # Leader safety: optimistic concurrency and the audit
//
// The lease alone does not keep two leaders apart: a leader paused (GC, a
// partition) past its lease can land a write it decided before the pause,
// after a new leader rebuilt the allocation. So every Node write carries
// the resourceVersion of the copy it was decided on (a merge patch with
// metadata.resourceVersion: the API server refuses it with a conflict
// when the Node changed since); on a conflict the reconcile reads the
// Node from the API server (not the cache, which may lag) and decides
// again (bridgehead_controller_write_conflicts_total{kind="node"}). A precondition
// on the whole object rather than a JSON-patch test of the annotation:
// RFC 6902 cannot test that an annotation is absent, which is the case
// that matters (a first range), and the kubelet rarely writes the Node
// object itself (heartbeats go to its Lease), so conflicts stay rare.
// This refuses a stale write to a Node that changed; it cannot refuse two
// leaders each giving one block to a different Node that neither had
// written. The leader therefore audits, at the start of its lead and every
// Options.AuditInterval (--audit-interval, default 1 min) of Options.Clock (the
// clock tests inject), the blocks all Nodes record (annotation, else
// spec.podCIDRs; from the cache), and reports every pair of Nodes whose
// blocks overlap: the gauge bridgehead_controller_double_allocations, a
// Warning Event DoubleAllocation on both Nodes when a pair appears, and a
// log line when the set changes. It repairs nothing: see the next section.
//
// # A live node's range never changes
//
// A Node's pods have addresses from its range: changing the range leaves
// them dead (and spec.podCIDRs cannot change anyway). Once the annotation
// bridgehead.io/pod-cidrs is written, the controller never changes or
// drops a block of it (patchNode refuses to); it may only add a family
// the node lacks (a site that became dual-stack), which leaves every
// existing address alone. When the recorded range cannot stay as it is in
// the node's site (held by another Node as well; not a block of the
// site's pool: a pod CIDR gone, a Site deleted and recreated, a hand
// edit), the node keeps it, gets no other, and the controller raises the
// Node condition BridgeheadSite=False (PodRangeConflict or
// PodRangeOutsidePool, the message says what to do: drain and delete the
// Node so it rejoins with a new range, or give the Site a pod CIDR that
// contains it) and a Warning Event. The allocator holds such a range
// outside the pool (ipam: strays), so it is not handed to anyone else if
// the pool comes to contain it. When the allocator holds a range for a
// node that records another (a write of an old leader landed), the
// Node's record wins: ours was never written to it and goes back to the
// pool at once.
//
// # Site edits and deletion
//
// The Site CRD refuses (CEL transition rules, on the spec so that removing
// a field is caught too) a change of spec.podBlockSize or podBlockSize6
// and the removal of a spec.podCIDRs entry: either would take blocks in use
// out of the pool. Appending a pod CIDR is allowed. Should a pool still
// shrink (a CRD installed without the rules, an invalid spec replaced),
// the allocator keeps the blocks of the nodes that lost them reserved
// (reported as above, never reused). A Site carries the finalizer
// bridgehead.io/pod-blocks, added by the leader's site reconcile and
// removed when the Site is being deleted and no Node holds a block of it
// (none in the allocator, none labelled with it and recording blocks in
// the cache); a Site being deleted takes no new Node (they get NoSite).
// The finalizer needs patch on sites; a credential without it gets one
// warning and unguarded deletion, not failed reconciles.
//
// # Site status (reconcileSite)
//
// Nodes, allocated blocks, free blocks per family, gateways and the
// conditions Valid (the spec parses, the pod CIDRs fit the allocator, no
// node CIDR or pod CIDR overlaps another Site's) and PoolExhausted (nodes
// wait for a block). A site is reconciled at most once per second under
// churn: node changes add its key with a one-second delay, which the
// queue coalesces.
//
// # The catalog (publish.go, plan.go)
//
// The leader publishes what gateways and node agents read as kube/catalog
// ConfigMaps in --namespace: the base (every published Site with its
// registered Gateways, no nodes), and each site's index and node slices
// of at most 500 nodes.
// buildPlan makes it from the informer caches alone: the Sites, the
// Gateways with a public key and endpoint (spec, else what the gateway
// registered in status) or with a public key and spec.behindNAT (a
// gateway behind NAT has no endpoint, ever, so it cannot wait for one:
// the Gateway says so explicitly, because "no endpoint yet" would
// otherwise be indistinguishable from "not registered yet"; its Site's
// spec.via names its hubs, as `via` does in a catalog file), and the Nodes that carry the site label and the
// pod-cidrs annotation (their first InternalIP of each family; a block of
// a family the node has no address of is left out, with an Event).
//
// The whole plan goes through the checks of `bridgehead check`
// (kube.CheckPlan). A Site that fails them (or failed the site sync) is
// left out, Gateways, Nodes and all, and its Valid condition says which
// object and field; a Node that fails them is left out with an Event; the
// rest is checked again until clean. A problem that belongs to no Site
// publishes nothing: all or nothing. Gateway hostnames are not looked up
// (the gateways resolve them), so a DNS failure here withdraws no site.
//
// Writes: only objects whose labels or data changed, slices first, then
// the sites' indexes (each its site's commit point: it lists each slice's
// hash), then the base (the sites' commit point), then the slices and
// indexes no longer listed are deleted. A join rewrites a slice and its
// site's index, never the base, so it reaches the site's watchers only
// (kube/catalog, "A join costs its site, not the cluster"). One worker publishes, and the next
// publication that writes starts no sooner than --catalog-interval (1 s)
// after the end of the last one that did, so under churn every object is
// written at most once a second; events only add the one catalog key to
// a delaying queue, which coalesces them. The worker compares with what
// it last wrote (else the ConfigMap cache); a ConfigMap changed or
// deleted by anyone else brings a new publication.
//
// # The Azure route table (azure.go, package azureroutes)
//
// On AKS with `--network-plugin none` a site's node subnet needs a route
// per node's pod range (via the node) and per other site's CIDR (via the
// site's routerAddress): a VNet routes by destination address, and
// nothing else carries pod traffic between the site's nodes. They change
// at every join, so they cannot stay a hand step. With
// --azure-route-table and --azure-route-site (Options.AzureRoutes; off by
// default) the leader hands the sites of every publication that changed
// the catalog to one worker, which makes the table's bh-* routes exactly
// those (azureroutes.Syncer: list, create or update what differs, delete
// what is no longer wanted, never another route) at most every
// --azure-route-interval (10 s) and every 5 minutes regardless, so a hand
// edit is undone. A failed sync is retried with the queue's backoff. The
// credential is azidentity's default (workload identity or a managed
// identity) with, on the route table only, routeTables/read and
// routeTables/routes/read, /write and /delete (docs/getting-started/aks.md, step
// 7). A table over Azure's 400 routes is refused before any write.
//
// # Caches: only what the controller reads
//
// The informers' transforms (handlers.go) shape what the caches hold. A
// Node keeps its name, UID, resourceVersion, creation and deletion
// times, its bridgehead.io/ labels and annotations, spec.podCIDR(s),
// status.addresses and the BridgeheadSite condition; managedFields,
// status.images, nodeInfo, capacity, the kubelet's conditions and every
// other label and annotation are dropped before the cache sees them.
// Sites, Gateways and the catalog ConfigMaps lose managedFields. Nothing
// stripped is written back: Node writes are patches of the controller's
// own fields, and an update from a cached Site or ConfigMap without
// managedFields leaves the server's as they are. Measured with 10,000
// kubelet-like Nodes (about 20 labels, 40 images, five kubelet
// conditions, managedFields from the API server) synced from the real
// API server (BenchmarkNodeCacheHeap, live heap after GC; `go test -run
// XXX -bench BenchmarkNodeCacheHeap -benchtime 1x ./controller/`,
// BRIDGEHEAD_INFORMER_NODES sets the count, 10,000 by default): the full
// objects take 192.1 MiB (20,142 bytes a Node), the transformed 21.4 MiB
// (2,246 bytes a Node).
//
// The binary leaves its clients' ContentType unset, and client-go's
// generated clients then ask for application/vnd.kubernetes.protobuf for
// built-in kinds: Nodes, ConfigMaps, Leases and Events go as protobuf;
// Sites and Gateways as JSON (the API server serves no custom resource
// as protobuf). Protobuf stays, because it helps where the controller
// reads most: BenchmarkNodeSyncProtobuf (`go test -run XXX -bench
// BenchmarkNodeSyncProtobuf -benchtime 2x ./controller/`) syncs the
// Node informer with transformNode over the same 10,000 Nodes through a
// clientset with ContentType application/json and one left unset,
// interleaved, and checks that every answer came in the format asked
// for; its rebuildList does the rebuild's paged List the same two ways.
// 10,000 kubelet-like Nodes, means of 2, load average 12 to 17 from
// other work:
//
//   - informer sync: protobuf 1.15 s, JSON 6.70 s (three earlier runs,
//     load average up to 27: 3.47 / 13.45 s, 2.31 / 8.73 s, 1.15 / 6.76
//     s); allocated 491 MiB against 467 MiB; the same 21.4 MiB cache;
//   - the rebuild's List: protobuf 1.28 s, JSON 3.87 s; allocated 578
//     MiB against 585 MiB; 191 MiB held until the rebuild ends, either
//     way, while rebuild kept each Node whole. Since listNodes keeps
//     each as transformNode does: 20.4 MiB held, either way (protobuf
//     1.74 s, JSON 4.29 s, means of 2, load average 4 to 6;
//     `go test -run XXX -bench 'BenchmarkNodeSyncProtobuf/rebuildList'
//     -benchtime 2x ./controller/`);
//   - read from the connection: 4.0 MiB against 6.9 MiB (compressed by
//     the API server; these Nodes are near copies of each other, so real
//     ones compress less).
//
// So a standby's start and a new leader's rebuild take a sixth to a
// third of JSON's time, for 5 % more allocation in the informer. A
// clientset with ContentType unset is therefore not a JSON baseline, and
// the benchmark's JSON arm sets it. Memory is the cache's (the
// transform keeps the same fields whatever the format) and the rebuild's:
// see "Scale" for what that means for the limit.
//
// # Scale
//
// Failover at 10,000 Nodes over 200 Sites (TestKubeFailoverScale, two
// `bridgehead controller` processes against the real API server, default
// lease timings, 20 joins a second throughout; two runs, load average 9
// to 13 on the 2-core machine from other work; `BRIDGEHEAD_FAILOVER_SCALE=10000
// go test -run 'TestKubeFailoverScale$' -v -timeout 60m ./controller/`,
// which builds the binary itself and logs each figure below):
//
//   - the leader stopped (SIGTERM, the Lease released): the standby
//     leading after 0.39 s / 0.88 s, its allocator rebuilt after 1.07 s /
//     1.72 s (the rebuild itself 0.52 s / 0.69 s), its first full
//     reconcile (about 10,030 Nodes) done after 1.66 s / 2.54 s;
//   - the leader killed (SIGKILL, the Lease expired): leading after
//     15.15 s / 15.99 s, rebuilt after 16.37 s / 17.72 s, first full
//     reconcile (about 10,500 Nodes) after 18.28 s / 20.39 s.
//
// 572 / 630 nodes joined during the two failovers; afterwards every Node
// had a range, none of the blocks (21,144 / 21,260) was held twice (read
// from the API server), and no leader's audit reported one. RSS: a
// standby 97 to 100 MiB, a leader 160 to 204 MiB (peak 214 MiB, the
// VmHWM the test logs). Its Nodes are small (a name, addresses and what
// the controller writes); a kubelet's are about 20 KB. rebuild used to
// keep every listed Node whole until it ended: 191 MiB at 10,000
// kubelet-like Nodes (BenchmarkNodeSyncProtobuf/rebuildList above),
// which would have put a new leader of a real 10,000-node cluster near
// 214 + 191 = 405 MiB. listNodes now keeps what transformNode keeps,
// 20.4 MiB at 10,000, about what the test's small Nodes cost whole, so
// the test's 214 MiB peak stands for kubelet Nodes too, give or take
// those 20 MiB (two measurements, not one run with kubelet Nodes).
// deploy/kubernetes/controller.yaml's 512Mi limit is sized from that:
// about 2.2 times the estimate; raise it beyond 20,000 Nodes. A cold
// start (every block allocated) published all 10,000 nodes 67 s / 75 s
// after the process started.
//
// # Events
//
// Events use events.k8s.io/v1. Nodes and Sites are cluster-scoped, and the
// API accepts Events about cluster-scoped objects only in the "default"
// namespace, so that is where they go; --namespace holds the Lease and
// the catalog.
package controller
