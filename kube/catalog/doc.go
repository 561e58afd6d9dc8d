// Package catalog is the catalog as the controller publishes it and the
// gateways read it: core/v1 ConfigMaps in the controller's namespace.
//
// # Objects
//
// The base ConfigMap BaseName (label CatalogLabel=KindSites) holds every
// valid site in the `sites:` YAML of a gateway's config file, without
// nodes: node and pod CIDRs (the aggregates other sites route), routers,
// keepalive and probe interval, and the gateways with address, endpoint
// and public key. Under SiteHashesKey it holds the SHA-256 of each site's
// entry, and under RelaysKey the relay spec of sites that have one (a
// relay listens on each gateway's own address, so kube.RelayToConfig
// makes the gateway's section from it).
//
// Each site has an index, IndexName(site) (labels CatalogLabel=KindIndex,
// SiteLabel=<site>): the hash of the site's entry it was written with,
// and the site's node slices in order with the SHA-256 of each.
//
// Node slice k of a site is SliceName(site, k) (labels CatalogLabel=
// KindNodes, SiteLabel=<site>): at most MaxNodesPerSlice nodes with their
// addresses and pod blocks, sorted by name, so the same nodes always give
// the same bytes.
//
// # Stable buckets
//
// A node's slice is a bucket: the low bits of the FNV-1a hash of its name
// over the site's slice count, a power of two. So a join or a leave
// changes one slice (and its site's index, which lists the slices'
// hashes), never the slices around it. The count of a new site aims at
// 250 nodes a slice (half of MaxNodesPerSlice, so hashing's unevenness
// stays far from the bound; a slice over it doubles the count anyway).
// The writer passes the counts in force (PreviousBuckets, from the
// indexes it published), and a site keeps its count while the average
// stays between 100 and 400 nodes a slice: only then, once per doubling
// or halving of the site, do all its slices move (doubling splits slice k
// into k and k+count, halving merges them back). A site whose size goes
// back and forth across one number rewrites one slice at each step. Every
// slice of the count is written, even an empty one, so the index's list
// tells the count to the next writer (a new leader included). Assemble
// returns a site's nodes in name order whatever the buckets.
//
// # A join costs its site, not the cluster
//
// Every node agent and gateway watches the base (by name) and its own
// site's index and slices (by label), so what a write costs is its size
// times its watchers. A join writes one slice and its site's index; the
// base changes only when a site's entry does (a Site or Gateway edited,
// added or removed). BenchmarkJoin, 10,000 nodes over 200 sites (one
// agent a node, two gateways a site, and the controller watching): a join
// writes 2 objects, 7,663 bytes, 413,802 bytes to watchers; when the base
// listed every slice's hash and so was rewritten by every join, 2
// objects, 136,275 bytes and 1,340,388,210 bytes to watchers (the 126 KiB
// base to every agent and gateway). In one site of 10,000 nodes the site is the
// cluster: 30,570 bytes written, 305,822,280 to watchers (310,314,076
// before), the index (64 slice hashes) taking the base's place.
// Command: `go test -run XXX -bench BenchmarkJoin -benchtime 20x
// ./kube/catalog/` (pure computation, no API server); the "before"
// figures are the base-as-commit-point format's, as the commit that
// added the indexes (75ce347) records them.
//
// What one node agent pays, measured against a real API server
// (bench/scale TestAgentJoinCost, 10,000 nodes over 200 sites, the agent
// in its own process, 30 joins a window, one a second, idle subtracted;
// CPU is utime+stime at 10 ms resolution; `BRIDGEHEAD_JOIN_SCALE=10000
// go test -run 'TestAgentJoinCost$' -v -timeout 30m ./bench/scale/`,
// BRIDGEHEAD_JOIN_COUNT sets the joins a window; the "before" figures
// are the same harness in a worktree of 4ce1509): a join in another site
// costs it 1 ms CPU and 8 bytes received (before: 28 ms and 129,660 bytes, the
// base decoded and the catalog rendered again to find nothing changed); a
// join in its own site 153 ms and 9,328 bytes (before: 165 ms and 138,358
// bytes); so a join anywhere 1.8 ms and 54 bytes an agent, 17.6 s CPU and
// 0.5 MB over the 10,000 agents (before: 28.7 ms and 129,704 bytes an
// agent, 287 s and 1.30 GB). Agent RSS 41 MiB, peak 51 MiB (VmRSS and
// VmHWM after the joins), which deploy/kubernetes/node-daemonset.yaml's
// 128Mi limit is sized from (docs/operations/sizing.md).
//
// A gateway needs all of the base (every site's aggregates and gateways)
// and only its own site's index and slices: Assemble builds exactly that.
//
// # Publication: no reader sees a torn catalog
//
// A writer writes the slices that changed first, then the indexes that
// changed, then the base if it changed, and then deletes the slices and
// indexes no longer listed (WriteOrder). Two commit points, each naming
// exactly what it commits:
//
//   - a site's index lists the hash of each of its slices, so a reader
//     that sees an index before a slice it lists (informer events are per
//     object), or an old index with a rewritten slice, finds a hash that
//     does not match;
//   - a site's index names the hash of the site's entry it was written
//     with, and the base lists the hash of each entry it holds, so a
//     reader that sees a new base with an old index of its site, or the
//     reverse, finds them different. An index is not rewritten when only
//     other sites' entries change: the site's nodes depend on its own
//     entry only (its node and pod CIDRs), so any base that holds the
//     same entry goes with them.
//
// Either mismatch is an error wrapping ErrIncomplete from Assemble: the
// reader keeps its last good catalog until the next event completes the
// picture. What a reader accepts is always one site entry of some base
// with exactly the nodes published for it. A gateway never applies half a
// publication.
//
// # Upgrades
//
// Before indexes, the base listed every site's slices under SlicesKey
// and was the only commit point. Assemble, Refs and BucketCounts still
// read that format, so node agents and gateways are upgraded first; a
// reader of the old format that sees a base without SlicesKey keeps its
// last catalog (a malformed publication) until it is upgraded. The
// controller, upgraded last, keeps the slices where they are (the names
// do not change) and writes the indexes before the base.
//
// # Why ConfigMaps, and why 500 nodes a slice
//
// ConfigMaps need no CRD, and an in-cluster gateway can mount them as
// files (the base, its site's index and slices, optional so a missing
// slice is an empty file until it exists); RBAC is one Role in one
// namespace.
// etcd refuses requests over 1.5 MiB, so one object cannot hold 10,000
// nodes' addresses and pod blocks together with every site; slicing per
// site and per MaxNodesPerSlice nodes keeps each object near 70 KiB at
// most (10,000 dual-stack nodes: 200 sites give a 115 KiB base, 7.5 KiB
// slices and 208-byte indexes, one site a 607-byte base, a 7.6 KiB index
// and 64 slices of at most 23 KiB; `go test -run 'TestScale$' -v
// ./kube/catalog/` logs them), and a node joining rewrites one small slice and its
// site's index instead of a cluster-wide object every gateway must fetch
// again. Render refuses any
// object over MaxObjectBytes (1 MiB) rather than let the API server
// refuse it midway through a publication.
//
// Unbounded-Net publishes node slices of 500 nodes too (a custom
// resource per slice, read by every gateway). bridgehead differs in
// three ways: slices are per site, so a gateway watches only its own
// site's (plus the one base); the site's index carries the hashes, so a
// reader can tell a complete publication from one in progress without a
// generation counter on each object; and the content is the config
// file's own YAML, so the gateway puts it through the same checks and
// the same all-or-nothing reload as a file an operator wrote.
package catalog
