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
// # The host's netfilter (HostNet, stages bridge-netfilter and forward)
//
// A pod's packet to a ClusterIP whose endpoint is a pod on the same
// bridge is DNATed on the way in, but the reply is bridged straight back
// and never meets conntrack, unless br_netfilter is loaded and
// net.bridge.bridge-nf-call-iptables (-ip6tables for IPv6 blocks) is 1.
// The agent sets both at every sync (they are per network namespace, so
// this is the host's, as the agent runs with the host network) and loads
// the module with modprobe when its sysctls are missing; when it cannot
// (no /lib/modules, no CAP_SYS_MODULE) the stage fails saying what to do.
//
// A forward base chain with policy drop in another table (Docker, ufw,
// firewalld, an iptables-nft FORWARD chain) drops what the pods send to
// other nodes and sites. The agent only reports it: in nftables an
// accept ends the packet's walk through one base chain only, and a drop
// in any other base chain on the hook is final, so an accept rule in
// inet bridgehead-node cannot overrule it (measured in a netns: UDP
// forwarded through a router namespace passed with no firewall, was
// dropped by `chain FORWARD { policy drop }` in table ip filter, still
// dropped with `ip saddr/daddr <pods> accept` in a priority -10 forward
// chain of inet bridgehead-node, and passed with the same accepts in
// the FORWARD chain itself). Editing the other table is the fix, and it
// belongs to its owner (who rewrites it on reload). The check reads
// every forward filter chain of the ip, ip6, inet and bridge families
// with policy drop and counts it as fine when one of its rules, or of a
// chain it jumps to, accepts on a source match covering the node's block
// and nothing else (the rule the error message proposes). iptables-legacy
// is invisible to nftables: its FORWARD chains (IPv4 and IPv6 filter
// tables) are read from the kernel as iptables-legacy -S reads them
// (getsockopt IPT_SO_GET_ENTRIES), with the same rule for accepts,
// jumps followed; only a table already listed in
// /proc/net/ip_tables_names is asked for, as asking loads it otherwise.
//
// Each failing stage sets the Node condition False with its reason
// (kubenode: BridgeNetfilterMissing, ForwardBlocked) and one Warning
// Event; the other stages carry on.
//
// # Restarts, upgrades and rollbacks (state.go, adopt.go)
//
// A new agent process adopts the node the old one left: it reads the
// host state file (Options.StateFile: what the agent owns, with a schema
// version) before it touches anything, migrates an older schema (none at
// all is schema 1, the agents before the file) and compares everything
// with its model, changing only what differs: no table is deleted, no
// route flushed, the CNI config is not rewritten when it is the same. A
// file of a newer schema (a rollback) makes it change nothing on the
// node and report stage "state" until it is gone.
//
// Errors never leave the node half-changed on purpose: a catalog that does
// not load leaves everything as it was, and each owner reports its own
// failure (log, metrics) while the others carry on.
package nodeagent
