// Package catalog is the catalog as the controller publishes it and the
// gateways read it: core/v1 ConfigMaps in the controller's namespace.
//
// # Objects
//
// The base ConfigMap BaseName (label CatalogLabel=KindSites) holds every
// valid site in the `sites:` YAML of a gateway's config file, without
// nodes: node and pod CIDRs (the aggregates other sites route), routers,
// keepalive and probe interval, and the gateways with address, endpoint
// and public key. It also holds, under SlicesKey, each site's node slices
// in order with the SHA-256 of each, and under RelaysKey the relay spec
// of sites that have one (a relay listens on each gateway's own address,
// so kube.RelayToConfig makes the gateway's section from it).
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
// changes one slice (and the base, which lists the slices' hashes), never
// the slices around it: at 1,000 nodes in one site a join writes the base
// and one slice; at 10,000 nodes in one site, 2 objects and 31,019 bytes
// where cutting by position in name order wrote 22 objects and 1,465,400
// bytes (BenchmarkJoin; 200 sites of 50: 2 objects, 136,275 bytes both
// ways, the base being most of it). The count of a new site aims at 250
// nodes a slice (half of MaxNodesPerSlice, so hashing's unevenness stays
// far from the bound; a slice over it doubles the count anyway). The
// writer passes the counts in force (PreviousBuckets, from the base it
// published), and a site keeps its count while the average stays between
// 100 and 400 nodes a slice: only then, once per doubling or halving of
// the site, do all its slices move (doubling splits slice k into k and
// k+count, halving merges them back). A site whose size goes back and
// forth across one number rewrites one slice at each step. Every slice of
// the count is written, even an empty one, so the base's list tells the
// count to the next writer (a new leader included). Assemble returns a
// site's nodes in name order whatever the buckets.
//
// A gateway needs all of the base (every site's aggregates and gateways)
// and only its own site's slices: Assemble builds exactly that.
//
// # Publication
//
// A writer writes the slices that changed first, the base last, and then
// deletes slices the base no longer lists. The base is the commit point:
// its hashes name the exact slice contents of the publication, so a
// reader that sees a new base before a slice it lists (informer events
// are per object), or an old base with a rewritten slice, gets an error
// wrapping ErrIncomplete from Assemble and keeps its last good catalog
// until the next event completes the picture. A gateway never applies
// half a publication.
//
// # Why ConfigMaps, and why 500 nodes a slice
//
// ConfigMaps need no CRD, and an in-cluster gateway can mount them as
// files (the base and its site's slices, optional so a missing slice
// is an empty file until it exists); RBAC is one Role in one namespace.
// etcd refuses requests over 1.5 MiB, so one object cannot hold 10,000
// nodes' addresses and pod blocks together with every site; slicing per
// site and per MaxNodesPerSlice nodes keeps each object near 70 KiB at
// most (10,000 dual-stack nodes: 200 sites give a 126 KiB base and
// 7.5 KiB slices, one site an 8 KiB base and 64 slices of at most 23 KiB;
// see TestScale), and a node joining rewrites one small slice instead of a
// cluster-wide object every gateway must fetch again. Render refuses any
// object over MaxObjectBytes (1 MiB) rather than let the API server
// refuse it midway through a publication.
//
// Unbounded-Net publishes node slices of 500 nodes too (a custom
// resource per slice, read by every gateway). bridgehead differs in
// three ways: slices are per site, so a gateway watches only its own
// site's (plus the one base); the base carries the hashes, so a reader
// can tell a complete publication from one in progress without a
// generation counter on each object; and the content is the config
// file's own YAML, so the gateway puts it through the same checks and
// the same all-or-nothing reload as a file an operator wrote.
package catalog
