// Package nodeagent is `bridgehead node`: the agent on every node of every
// site that gives the node a pod network and keeps it connected to the
// other nodes and sites, with nothing that encrypts or tunnels.
//
// One model, Desired, holds everything a node needs: its own pod blocks,
// the routes to the other nodes of its site (their pod blocks via their
// addresses) and to every other site (node and pod CIDRs via the site's
// gateways, as `bridgehead routes` renders them: package noderoutes), and
// the cluster's CIDRs that pod traffic reaches without SNAT. FromConfig
// builds it from a catalog file; other sources (the Kubernetes API) build
// the same model.
//
// The agent makes the node match the model, level-triggered and
// idempotent, with three owners that never touch anything else:
//
//   - CNI: a conflist for the reference plugins (bridge with host-local
//     IPAM over the node's blocks, portmap, loopback), written atomically;
//     missing plugin binaries are copied in from the image. Two checks
//     come first, and fail the stage with the reason (the node stays
//     NotReady and says why): another CNI's config in the directory
//     (ours sorts first and would silently win, and undo a chained
//     plugin's edits at every sync; Options.CNI.Coexist writes ours
//     anyway, as Unbounded-Net's manageCniPlugin: false coexists), and
//     plugins whose VERSION command does not list the conflist's
//     cniVersion (every sandbox would fail). A plugin that passed is not
//     asked again until its file changes.
//   - Routes: netlink routes tagged with RouteProtocol. Set lists the
//     routes of that protocol and adds, replaces or deletes until they
//     equal the model; routes of any other protocol are never touched.
//     Deletions of ours (netlink notifications) and a periodic full check
//     repair them.
//   - SNAT: the nftables table "inet bridgehead-node": masquerade traffic
//     from the node's pod blocks to anything outside the cluster's CIDRs.
//     The table's content (chain, rules, sets and their elements) is
//     compared with the model at every sync, the periodic one included,
//     and replaced whole, in one transaction, only when it differs.
//
// Errors never leave the node half-changed on purpose: a catalog that does
// not load leaves everything as it was, and each owner reports its own
// failure (log, metrics) while the others carry on.
package nodeagent
