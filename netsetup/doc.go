// Package netsetup applies the kernel side of a gateway: the TUN link's MTU
// and state, routes of every remote site's CIDRs into the TUN, routes of
// local nodes' pod ranges toward those nodes, and IP forwarding.
//
// It talks netlink through github.com/vishvananda/netlink instead of
// running ip(8), so errors come back as values and state can be compared.
// Apply is idempotent: it adds what is missing, removes what it added that
// is no longer wanted, and leaves everything else alone. Close removes what
// it added.
//
// WatchRoutes keeps the routes without listing the table: from route
// notifications it puts back just the routes of ours that were deleted,
// and from link notifications it restores everything when the TUN goes
// down (IPv4 routes are flushed then without a notification each). A
// full Apply is left as a rare backstop: at 100k prefixes it lists every
// route, where a repair costs what was deleted.
package netsetup
