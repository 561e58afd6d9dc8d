// Package azureroutes keeps an Azure route table in step with the
// catalog: the last hand step of the AKS path with `--network-plugin
// none` (docs/getting-started/aks.md, step 7).
//
// # Why a route table at all
//
// An Azure VNet delivers a packet by its destination address, not by the
// MAC address a node put on it: a packet for another node's pod (an
// address of no NIC) goes where the subnet's route table sends it, else
// nowhere. So with no CNI that encapsulates, the node subnet of a site
// needs, as AKS kubenet's route controller keeps, one route per node's
// pod range (next hop the node, VirtualAppliance; the node NICs need IP
// forwarding), and one per other site's CIDR (next hop the site's
// routerAddress, the internal load balancer in front of its gateways).
// The node agent's routes on each node do not replace them: they choose
// the next hop inside the node, and the VNet still drops what it has no
// route for. The routes change whenever a node joins or leaves, which is
// why a hand step (`bridgehead routes --format azure`) cannot keep up.
//
// # What the Syncer does
//
// Sync computes the table from a catalog (noderoutes.AzureRoutes: the
// same routes `bridgehead routes --format azure` prints) and makes the
// table hold exactly those among the routes it owns, the ones whose name
// starts with "bh-": it lists the table's routes, creates or updates the
// ones missing or different, and deletes owned ones no longer wanted.
// Routes of other names (the operator's, or a default route to a
// firewall) are never touched. It is level-triggered: every Sync reads
// the table, so a route edited or deleted by hand comes back on the next
// one. It refuses, before any write, a table over Azure's 400 routes per
// route table (MaxRoutes): a site of 200 dual-stack nodes, or a few sites
// with many remote CIDRs, reach it; aggregate remote sites' CIDRs into
// supernets, or use a CNI that encapsulates between nodes, beyond that.
//
// Writes go through armnetwork's RoutesClient (long-running operations,
// polled to the end; azcore retries 429 and 5xx with Retry-After), at
// most Options.Parallel at a time. A failed write fails the Sync after
// the others finished; the next Sync retries whatever is still
// different.
//
// # In the controller
//
// `bridgehead controller --azure-route-table <route table resource ID>
// --azure-route-site <site>` (opt-in; off by default) runs a Syncer on
// its own worker: after each catalog publication that changed anything,
// no more often than --azure-route-interval, and every 5 minutes
// regardless (drift). Only the leader syncs. The credential is
// azidentity's DefaultAzureCredential: AKS workload identity (the
// controller's ServiceAccount federated with a user-assigned managed
// identity), or a managed identity. The identity needs, on the route
// table only, Microsoft.Network/routeTables/read and
// Microsoft.Network/routeTables/routes/read, /write and /delete (the
// built-in Network Contributor role scoped to the route table, or a
// custom role with those four actions).
//
// A Syncer is safe for use by one goroutine at a time.
package azureroutes
