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
// # Allocation state
//
// The ipam.Allocator holds which node has which block. On becoming leader,
// after the caches have synced and before any worker starts, the
// controller lists Nodes from the API server (a consistent read, not the
// cache, so a write of the previous leader that the cache has not seen yet
// still counts), and rebuilds the allocator from the blocks they record:
// the annotation bridgehead.io/pod-cidrs first, else spec.podCIDRs, oldest
// Node first. Nothing else is persisted.
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
//   - A deleted node's blocks return to the pool after --release-grace.
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
// # Events
//
// Events use events.k8s.io/v1. Nodes and Sites are cluster-scoped, and the
// API accepts Events about cluster-scoped objects only in the "default"
// namespace, so that is where they go; --namespace holds the Lease.
package controller
