// Package router is the forwarding core of bridgehead.
//
// The data path is split the way trusted userspace tunnels split it:
//
//   - the inside loop reads plain packets from the TUN device in batches,
//     looks the destination up in a longest-prefix-match table of every
//     site's node and pod CIDRs, seals each packet in place for one gateway
//     of the destination site and hands runs of packets for the same
//     gateway to the UDP bind in one call. A reader goroutine reads the
//     TUN as fast as it can into a per-flow fair queue (insidefq.go,
//     package fq: deficit round robin over the flow hash below, CoDel
//     drop or ECN mark at a flow's head); a sealer goroutine takes at most
//     sealBatch packets at a time out of it in fair order, so a small
//     flow waits for one batch, not behind a bulk flow's backlog, and a
//     bulk flow's standing queue is held near the CoDel target. After a
//     quiet spell the reader seals a packet itself. Options.FIFOInside
//     keeps the earlier pipeline (insidePipe: bulk reads sealed by the
//     reader, single packets batched by the sealer, in read order);
//   - the outside loop reads datagrams in batches, finds the session by
//     its receiver index, authenticates and decrypts in place, checks the
//     replay window, checks that the inner source belongs to the sending
//     gateway's site and that the destination is local, and writes the
//     packets to the TUN in one call;
//   - the handshake loop owns all handshake state: it answers initiations,
//     completes its own, retransmits, gives up, flushes the packets
//     queued while a session was being set up, sets up sessions with
//     every remote gateway before traffic needs them, sends keepalives,
//     and runs the probes that decide whether each gateway is up.
//
// Lanes (lanes.go): with Options.Lanes the inside and outside loops run
// once per lane, each on its own queue of a multi-queue TUN and its own
// socket of one SO_REUSEPORT port. The sender writes a lane byte derived
// from the inner flow hash into each transport header (only toward a
// gateway that said, in a probe, that it reads them), and the receiver's
// kernel steers datagrams to sockets by it, so one gateway pair's flows
// spread over the receiver's cores while each flow stays in order. Each
// socket receives coalesced runs (GRO): a run holds one lane byte unless
// the receiver's GRO joined two lanes' runs, and then its lane opens the
// other's datagrams too and counts them (lane.strays).
//
// The express lane (package sparse): each inside reader sorts flows by a token
// bucket per flow hash bucket, in which each packet costs its size plus
// sparsePacketCost (so a fast flow's ACKs are not sparse). A sparse flow
// (a ping, DNS, an API call) skips the fair queue, and the reader seals
// and sends it at once with lane byte 0xff; a gateway with an express
// lane (Options.Express, said in its probes) has its kernel steer those
// to a socket of their own,
// read by an outside loop of its own that writes to a TUN queue of its
// own (Options.ExpressTUN), so they never wait behind a bulk flow's
// datagrams in a lane socket. A flow that outgrows its bucket goes
// through the fair queue from then on; express messages have their own
// replay window. With Options.ExpressSteered the kernel sorts flows
// instead (package steer's program on the TUN) and puts sparse ones on
// the express TUN queue, which the express lane reads and seals at once
// (express.go); with Options.ExpressPriority both express loops run on
// SCHED_FIFO threads of their own that wait for packets in the kernel, so
// that a busy gateway still handles a sparse packet as it arrives; with
// Options.ExpressKeepsP each keeps its P while the bulk lanes are busy
// (keepGate, the loop's own), so it needs none when it wakes.
//
// Several gateways per site: the inside path hashes each packet's flow
// (packet.FlowHashFragment; a later fragment, which has no ports, takes
// its first fragment's hash from its lane's small table, package
// flowhash) and
// ranks the site's gateways by rendezvous hashing
// (site.pick), preferring gateways that are up. "Up" is one liveness
// state per gateway (liveness.go): only evidence that our own packets
// reach it proves it alive (an answer to our probe, a completed
// handshake), never its own traffic, so a path cut one way only goes
// down too; a gateway unproven for its site's probe interval gets an
// authenticated probe (probe.go) that the outside loop answers at once,
// and only an answer to a probe still in flight counts (probestate.InFlight);
// ProbeMisses unproven intervals mark it down, and its flows move to the
// site's other gateways. Coming back is damped (probestate.Damper): only after
// RecoverProbes answered probes in a row, twice as many for each further
// down within about FlapDecay (up to 16 times), so a lossy path does not
// move its flows back and forth at the probe rate. A gateway that answers but cannot deliver to
// its own site (SetCanDeliver: the daemon watches its LAN link and its
// routes to the node CIDRs) says so in a flag of every probe and probe
// reply, and sends a probe to every gateway at once when that changes;
// they take it down (DownCannotDeliver) within a round trip and a probe
// tick. A gateway that is shutting down (SetDraining: the daemon's drain
// on SIGTERM) says so the same way with flagDraining, and they take it
// down (DownDraining) while it keeps forwarding what still reaches it;
// that planned stop is not counted as a flap. Gateways that carry none of our traffic are
// probed IdleProbeFactor times less often. Selection, metrics, status
// and readiness all read that one state.
//
// Handshake messages are filtered in the outside loop before they take a
// queue slot: wrong sizes and a wrong mac1 (keyed by our public key) are
// dropped there without allocating, so strangers never cost
// Diffie-Hellman. When the handshake queue is an eighth full the loop is
// "under load": messages without a valid cookie (mac2) get a cookie reply
// no larger than themselves instead of DH work, and each source is held
// to HandshakeRate per second.
//
// An optional KernelFilter (package earlydrop, an eBPF socket filter)
// applies the outside loop's first checks before datagrams are queued on
// the socket: runts, unknown types, wrong handshake sizes and transport
// messages for receiver indices that are not live. The router keeps its
// index map in step (every index reaches the filter before it is
// published), folds its counts into Drops, blocks sources that send bad
// mac1s faster than BadMACRate, and detaches it at the first failed
// update. Every check is still made in userspace.
//
// Path MTU black holes: now and then (MTUProbeInterval, six times less
// often for an idle gateway) each gateway that is up gets a probe padded
// to the tunnel's full size with a small one beside it (probestate.PathMTU).
// When mtuProbeTries full-size probes in a row go unanswered while their
// small companions are answered, the gateway is "up, MTU-degraded": it
// keeps no flows while a whole gateway of its site is up (site.pick ranks
// it below them; a flow is never split over gateways by packet size, and
// while every gateway of the site is degraded they keep their flows), a
// binary search over padded sizes reports its path MTU, and it is checked
// at full size every MTUProbeInterval until one passes.
//
// Path MTU: TCP SYNs crossing the tunnel in either direction get their
// MSS clamped to the tunnel MTU; packets over the MTU with DF set (or any
// IPv6 packet) are answered with ICMP "too big" from the gateway's own
// address, rate limited per source.
//
// Buffers are allocated once per loop; a packet is never copied on the way
// through except when it has to wait in a peer's bounded queue for a
// handshake (package setupqueue). Routing state (table, sites, peers) is immutable once
// published and swapped whole with SetConfig through an atomic pointer, so
// the hot path takes no lock for it. Sessions are found by receiver index
// in an open-addressing table of atomic slots (index.go), read without
// locks; a handshake's writes touch one slot, whatever the table's size.
//
// Every packet that is not forwarded is counted by direction and reason
// (see Reason); nothing is logged per packet. A summary of new drops is
// logged at most once per DropLogInterval. Nothing is logged per gateway
// per retry either: state changes of many gateways (unreachable, down,
// up, first sessions) are logged together, one line per kind per timers
// run, and a summary of unreachable gateways once a minute (reachlog.go).
// While a handshake of ours is pending the data path does not ask for
// another, and packets routed while the setup queue drains wait behind it.
//
// # Parts
//
// Router (router.go) holds the wiring that every loop reads: TUN, bind,
// identity, clock, the routing state (written by SetConfig alone, under
// cfgMu, and published whole), the session index (index.go: handshakes
// and the outside loop's confirm add and retire sessions, SetConfig
// retires removed peers'; lookups take no lock), drops and the flow
// hasher. The loops are Router methods: the inside loop (inside.go) and
// the outside loop (outside.go). Everything else is a part with one owner;
// each keeps its lock next to what it guards and has its own test:
//
//   - handshaker (handshake.go, hstimers.go): the handshake loop and all
//     handshake state: pending initiations, the reach log, drop
//     summaries, GC pacing. Its inbox (receive) is called by the outside
//     loop and want by the data path; both only send on channels. Its
//     counters are also written by the outside loop (a confirmed
//     session) and read by anyone. It reads the Router's wiring through
//     a back pointer and owns:
//   - handshakeGate (gate.go): mac1 (checked in the outside loops, each
//     batch with its own MAC1Checker, which keeps hash state), cookies, the per-source limit under load, the pace of our own
//     initiations, and the under-load decision with its holdover
//     (lastLoaded, handshake loop only). Behind it:
//   - sourceBlocker (blocker.go): sources of bad mac1s, blocked in the
//     kernel filter; note runs in the outside loop, gc in the handshake
//     loop; its mutex guards the blocks and the log pacing.
//   - kernelFilter (filter.go): the optional eBPF filter kept in step:
//     indices (called under the index table's lock), endpoints
//     (SetConfig), blocks (sourceBlocker), counts folded into drops and
//     a refused detach retried (poll: the handshake loop's timers and
//     the metrics collector). Any goroutine; its mutex guards the seen
//     counts and the indices to retry.
//   - prober (probe.go): the remote gateways' health. run (handshake
//     loop) steps every Peer's liveness and path MTU prober and sends the
//     probes; handleControl (outside loop) answers probes and books
//     the answers to probes in flight (probestate.InFlight);
//     cannotDeliver is written by SetCanDeliver from any goroutine.
//     liveness.go and package probestate name the writer of each
//     per-gateway field.
//   - icmpResponder (icmp.go): "too big" errors from the inside path,
//     rate limited per source (its limiter's GC runs in the handshake
//     loop); its mutex guards its buffers.
//   - tunDevice (tundev.go): the TUN, whose writes (outside loop, ICMP
//     errors) go through write, one at a time.
//   - loopHealth (health.go): one progress stamp per loop, each written
//     by its loop, read by Healthy.
//   - sparse.Flows (package sparse): one per inside lane, owned by its
//     reader goroutine (no lock): which flows are sparse.
//
// Per peer, Peer (peer.go) names the writer of each field: keypairs under
// its own lock, hs (peerHandshake) the handshake loop's alone.
//
// # Subpackages
//
// The parts that read nothing of the Router are packages of their own
// below it; each imports only leaf packages (packet, steer), never
// router, and the test in internal/layering keeps it so:
//
//   - router/lpm: the longest-prefix-match table of every site's node
//     and pod CIDRs (routingState.table).
//   - router/fq: the inside path's per-flow fair queue (deficit round
//     robin, CoDel, ECN), fed by insidefq.go.
//   - router/flowhash: the flow hash every lane shares and each lane's
//     fragment table, so a flow's fragments take its gateway (site.pick).
//   - router/sparse: the express lane's sorter of sparse and bulk flows,
//     one per inside reader.
//   - router/probestate: the per-gateway state machines the prober
//     steps (probes in flight, path MTU search, flap damping), held in
//     each gateway's liveness.
//   - router/setupqueue: a peer's bounded queue of packets waiting for
//     its session, pushed by the inside path and drained by the
//     handshake loop.
//
// What stays here needs the Router's wiring or the routing state, or is
// part of the API the daemon, transit, health and the tests read
// (Options, Config, PeerStats, LiveState, Reason, Drops, Clock).
//
// Time comes from an injected Clock so tests drive timers without sleeping.
package router
