// Package ipam allocates per-node pod blocks from the pod CIDRs of sites.
//
// It knows nothing of Kubernetes: the controller translates Nodes and Sites
// into calls here. One Allocator holds every site. Each site has a pool per
// address family (IPv4, IPv6) made of its pod CIDRs cut into blocks of the
// site's block size; a node of the site holds at most one block of each
// family the site has.
//
// # Design
//
//   - A pool is a list of spans (one per pod CIDR). A span keeps a bitmap of
//     its blocks, a count of set bits and a rotating cursor, so Allocate
//     costs a few word scans, never a walk over the nodes. A span uses at
//     most 2^20 blocks (a 128 KiB bitmap): a wider pod CIDR, common for
//     IPv6 (a /48 in /80 blocks), uses its first 2^20 blocks, and an
//     existing block beyond them is reported (BeyondLimit), not adopted.
//   - Blocks are never handed out twice: a bit is set from the moment a
//     block is allocated or adopted until its release grace has passed.
//     Pod CIDRs that overlap, within a site or across sites, are refused by
//     SetSite for the same reason.
//   - Release does not free a block at once: the block stays set for the
//     grace period (measured on the injected clock) so that a deleted
//     node's pods and routes are gone before another node gets its range.
//     A node that comes back to the same site within the grace gets its
//     old blocks again.
//   - Rebuild replaces all holdings with a list of (node, site, CIDRs) —
//     what the Node objects record — in the order given; the first holder
//     of a block keeps it and later claimants are reported. Rebuilding
//     from Holdings() gives back the same state. Blocks in their release
//     grace survive a Rebuild when nobody in the list claims them, so a
//     leader that loses and regains the lease in one process keeps the
//     grace. A new process learns of nodes deleted before it started from
//     Pending, recorded by the previous one: Restore after Rebuild keeps
//     their blocks out of the pool until the same expiry.
//   - A held block is never taken from its node by a pool change: when
//     SetSite's new pools (a pod CIDR removed, the block size changed) or
//     RemoveSite leave it out, the node keeps it as a stray, outside any
//     bitmap (OutOfPool lists it), gets no other block of that family, and
//     has it set again when a pool contains it once more; a removed site
//     stays, without pools, while its nodes hold blocks, so that no other
//     site takes its pod CIDRs. The node's pods use those addresses: a new
//     block would leave them dead, and handing the old one to another node
//     would give two nodes one range. The controller reports such nodes.
//     AdoptLive (and Rebuild entries marked Live) hold a node's recorded
//     range outside the pool the same way.
//   - Exhaustion is an error (errors.Is(err, ErrExhausted)); a dual-stack
//     Allocate that gets one family and not the other takes neither.
//
// # Concurrency
//
// An Allocator is safe for concurrent use; one mutex guards all of it.
// Calls are short (no I/O), so reconcile workers can share it.
package ipam
