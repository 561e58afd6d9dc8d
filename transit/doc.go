// Package transit carries traffic between two sites that cannot reach each
// other directly through a third site, the hub, which never decrypts it.
//
// # The problem
//
// A site behind NAT (a store, a factory, a VNet behind a NAT gateway) has
// gateways without a public endpoint: nothing can open a session toward
// them. Such a gateway starts its sessions toward every gateway that has
// an endpoint and keeps them open (Keepalive below); that covers traffic
// between it and every public site. Two sites that are both behind NAT
// still have no path: neither can send the first datagram. They reach each
// other through a hub site, one whose gateways have an endpoint and that
// both name (config: a site's `via`, or by default every other site with
// a gateway endpoint; see config.Config.HubsOf; `check` refuses two sites
// behind NAT that share no hub), and directly once the NATs allow it.
//
// # End to end, sealed once
//
// The two edge gateways E1 and E2 hold an ordinary bridgehead session
// with each other: the same Noise IK handshake, keys, counters, replay
// window, probes and anti-spoofing as any pair of gateways. Only the way
// their datagrams travel changes. E1 wraps each datagram for E2 (a
// handshake message or a transport message, already sealed for E2) in a
// relay message (crypto.MsgRelay, type 5) of its session with the hub H,
// naming E2 by KeyID:
//
//	type=5 | 0 0 0 | receiver index (H's) | counter | KeyID(E2) | datagram | tag
//
// The tag is the AEAD of E1–H's session over nothing, with the header
// and the datagram as associated data: authenticated, not encrypted
// again. H checks it, checks the counter in that session's replay window,
// finds E2's session by the KeyID, and rewrites the same buffer in place:
// E2's receiver index, the next counter of H–E2's session, KeyID(E1) as
// the source, a new tag. The datagram between the headers is not moved,
// not copied and not read. E2 checks the tag with its session with H,
// then hands the datagram to its ordinary receive path, which finds the
// E1–E2 session by the inner receiver index and opens it.
//
// Nebula's relays frame their packets the same way (an AEAD with an
// empty plaintext over the relay header and the end-to-end packet);
// Tailscale's DERP servers pass WireGuard packets framed with the
// destination's and then the source's public key over TLS.
//
// The alternative, sealing the datagram again as the plaintext of an
// ordinary transport message of E1–H's session, is simpler (one message
// type less) but makes the hub decrypt and re-encrypt every byte it
// relays, and the spoke encrypt every byte twice. Both add 40 bytes to
// the datagram (sealed twice: 32 of transport header and tag plus the
// 8-byte KeyID, before padding). BenchmarkHubCrypto measures the hub's
// cryptography per relayed datagram for both: sealed once costs the
// authentication alone, sealed twice also the cipher's keystream both
// ways; sealed once was cheaper at 512- and 1452-byte datagrams with
// both ciphers (medians of three runs; figures and the command in the
// README's "Sites behind NAT"). Sealed once is the choice.
//
// The hub forwards a received batch at a time: Bind.Receive rewrites
// each relay message in its buffer, then groups the batch's forwards by
// next hop (hopGroups: a batch mixes both directions of its spokes'
// traffic, data one way and acknowledgements the other) and hands them
// to the socket in one udp.LinuxBind.SendMany, which sends each hop's
// run of equal-sized messages as one segmented (UDP GSO) message, so
// the hub's stack runs once per run rather than once per datagram. A
// flow has one next hop, so its order holds. The spokes' relayed sends
// to the hub are segmented the same way.
//
// # No open relay
//
// A relay message is accepted only when its tag verifies under a session
// the hub completed by a Noise IK handshake with a static key of its own
// catalog, so only the catalog's gateways can make the hub send anything,
// and only to a catalog gateway the hub has a session with, never to an
// address named in the message. The hub relays from gateway S to gateway
// D only if both S's site and D's site name the hub's site among their
// hubs (Plan.Allowed: the destination's `via` binds too), S and D are of
// different sites, neither is the hub's own gateway and neither has an
// endpoint (a gateway with one is reached directly, so no hub relays for
// it; config.Config.HubsOf gives a site whose gateways all have one no
// hubs at all). A
// datagram goes out no larger than it came in: relaying amplifies
// nothing. Each session's replay window rejects a relay message replayed
// to the hub.
//
// # What the hub learns, and what it does not
//
// The hub learns: which gateway sends to which (the KeyIDs), when, and
// how much (datagram sizes, the inner plaintext padded to 16 bytes); the
// inner counters and receiver indices (message counts per session, when
// the pair rekeys); the handshake messages' clear parts (ephemeral keys,
// timestamps' sizes); and each spoke's public address and port, which it
// sees as the source of the spoke's datagrams.
//
// It does not learn the inner packets: no addresses, ports, protocols or
// payload of the traffic between the two sites, which stay encrypted
// under keys only E1 and E2 hold (Noise IK derives them from both
// gateways' static and ephemeral keys). It cannot forge them either: a
// datagram the hub makes up or alters fails E2's authentication and is
// dropped and counted (bridgehead_dropped_packets_total, reason
// bad_tag); a replayed one fails the inner replay window or, for a
// handshake initiation, the initiator's timestamp. Naming another source
// KeyID does not help: the receiving spoke compares the KeyID the hub
// names with the gateway whose session opened the datagram and drops a
// mismatch (ReasonOriginMismatch). What a compromised hub can do is
// delay, drop or reorder datagrams, and tell wrong public mappings
// (below): denial of service, which the spoke's health probes notice and
// fail over from, to another hub gateway or hub site.
//
// # A hub gateway without a session to the destination
//
// A spoke spreads its flows toward a gateway over the hub gateways it
// may use, but probes the gateway through one of them. A hub gateway
// that is up but has no session with the destination tells the sender
// so (a no-session message in its session with the sender, naming the
// destination; NoSessionInterval apart per pair), and the sender keeps
// that destination's flows off it for NoSessionHold while another hub
// gateway has a session (nosession.go).
//
// # Anti-spoofing stays per site, end to end
//
// The receiving spoke checks each inner packet's source address against
// the node and pod CIDRs of the site of the gateway whose end-to-end
// session opened it, the originating site, exactly as for a direct
// datagram; the hub's site plays no part. A hub, or a gateway of its
// site, cannot inject packets with its own site's addresses through a
// relayed session, and an edge site cannot send with another edge site's.
//
// # Keepalives through the NAT
//
// A gateway without an endpoint sends to every gateway with an endpoint
// at least every NATKeepalive (10 s) when nothing else went there: an
// authenticated keepalive, 32 bytes of payload (the daemon lowers the
// site's keepalive setting to it for those peers). The interval is set by
// the shortest UDP mapping timeout operators meet: some carrier-grade
// NATs drop an idle UDP mapping after 30 s, which is also Linux
// conntrack's default for a UDP flow that has not been answered
// (nf_conntrack_udp_timeout; 120 s once answered); Azure's NAT gateway
// keeps idle UDP mappings 4 minutes. Every 10 s leaves two lost
// keepalives before a 30 s mapping expires, and costs about 6 bytes per
// second per hub gateway. (WireGuard recommends 25 s, which leaves no
// loss margin at 30 s.) While the probes of the gateway's health checks
// run at their default interval (200 ms) they keep the mapping open on
// their own; the keepalive matters for long probe intervals and idle
// sessions. A new mapping (the NAT rebooted, its conntrack flushed) is
// seen by the hub on the next datagram: sessions follow a peer to a new
// source address, so the hub's path back moves at once.
//
// # Direct when the NATs allow
//
// The hub knows each spoke's public mapping. While it relays for a pair,
// it tells each side the other's mapping (a hint: a relay message of its
// own session with each, naming the other spoke, so the spokes can trust
// it as much as they trust the hub, and no more; HintInterval apart per
// pair). Each spoke then sends probes of their end-to-end session (relay
// framed, sealed with its keys, naming the sender) to that address
// while it sends the other anything, at most every DirectProbeInterval,
// each opening its own NAT's mapping toward the other (simultaneous
// open). With endpoint-independent mapping on both NATs, the probes pass
// both ways; a probe answered directly proves the path both ways, since
// the answer comes back the same way, and from then on the spoke sends
// everything for that gateway straight to where the answer came from,
// unwrapped. With a symmetric NAT on either side (a new port
// per destination, nftables `masquerade random`), the mapping the hub saw
// is not the one the other spoke must use, the probes never pass, and the
// pair stays on the hub. On the direct path the probes go on; with a
// probe unanswered for DirectTimeout (two probe intervals, 400 ms) the
// pair is back on the hub path, whose sessions the spokes' keepalives
// and probes toward the hub kept warm, well inside 1 s; an idle pair
// keeps its direct path, which the first probe after the pause tests. A hub cannot make a spoke
// use a path that does not lead to the other spoke: only an answer sealed
// in the end-to-end session switches, and a hub forwards only the
// end-to-end protocol's messages (types 1-4), never a hint or probe of a
// spoke. A spoke takes a hint only from a hub gateway it reaches the
// named gateway through, and never one naming its own address or the
// configured or current endpoint of another gateway (ReasonHintRefused):
// a hint must not make a directly reached gateway's datagrams look like
// another's. Transport messages arriving from the other spoke's mapping
// on their end-to-end session reach the router as from its pseudo
// endpoint: the router sees one gateway on one endpoint whichever way
// its datagrams take (direct.go). The address never decides that alone;
// the session does, and the router authenticates the datagram with it.
//
// # NAT routers that accept datagrams to themselves: the hub, by choice
//
// A NAT router with no input filter (it accepts unsolicited datagrams to
// its own address, as a Linux box with an empty ruleset does) breaks the
// simultaneous open when the other spoke's first probe reaches it before
// its own spoke's probe has left: the router delivers that probe to its
// own stack and confirms a conntrack entry for it, whose reply direction
// is its spoke's mapping toward the other. Its spoke's probe toward the
// other then clashes with that entry, and source NAT moves it to a new
// port, which the other side never learns: its own NAT drops it (input
// filter) or clashes in turn (none). The other spoke's probes, every
// DirectProbeInterval, refresh the stray entry long before the 30 s a
// Linux router keeps an unanswered UDP entry, so the pair stays on the
// hub for good. The NAT lab's routers drop such datagrams (an input
// policy of drop, as routers ship), and the pair goes direct there.
//
// Tailscale's disco was read for this. Its peers ping each other's
// candidate addresses at once when a CallMeMaybe, relayed by DERP, tells
// them to (our hints do the same), answer a ping at the address it came
// from, and report in the pong the address the ping was seen from, so a
// peer learns a mapping it could not predict. None of that helps here:
// the clashing probe is dropped before any gateway sees it, so there is
// no new address to learn, and Tailscale stays on DERP in the same case,
// trying to upgrade the path again while the peers talk.
//
// What would get through: both spokes silent toward each other for longer
// than the router's UDP timeout, then the spoke behind the router without
// input filter sending first, so that its mapping exists before anything
// arrives from the other side. Neither spoke can tell which router that
// is, so it takes rounds of silence of at least 30 s each, alternating
// which side speaks first, with the hub keeping the rounds in step, and
// it never works when both routers lack the filter. The pair keeps full
// connectivity through the hub meanwhile, the router's operator can close
// the case with one input rule (drop new inbound UDP to the router,
// which is every router's shipped default), and the path is visible
// (`status` shows "via hub" for the pair; bridgehead_transit_* counts the
// hub's relayed datagrams). So bridgehead keeps the pair on the hub,
// and documents the rule; the rounds above are the design to build if
// such routers turn out to be common among operators' edge sites.
//
// # Several hub gateways and hub sites
//
// A spoke's path to a remote gateway through a hub picks the hub gateway
// by the same rendezvous hash on the flow as the site's gateways, among
// the hub gateways that are up, over every gateway of every hub site the
// spoke uses; a hub gateway going down moves its flows within the probe
// bound (≤ 1 s) like any gateway. The router hands the flow hash of each
// sealed datagram down (router.FlowSender), and counts what goes through
// a hub gateway as traffic toward it, so it is probed at the active pace
// while it relays (spread.go).
//
// # What is in this package
//
// The framing itself lives with the other messages in package crypto
// (SealRelay, OpenRelay). This package has the Plan (which gateway is
// which KeyID, and who may relay for whom), the Forwarder (a hub's
// in-place forward path, which allocates nothing), Unwrap (a spoke's
// receive side) and their drop reasons. The router owns the sessions
// and calls them; it is the Sessions interface here.
package transit
