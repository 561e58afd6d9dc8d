// Package earlydrop drops, inside the kernel, datagrams that cannot be
// bridgehead messages, before they are queued on the outside UDP socket.
//
// A gateway on a public address receives garbage. Checking it in userspace
// costs a wake-up, a copy and a classification per datagram; under a flood
// that is CPU the tunnel's traffic needs, and the flood can fill the
// socket's receive buffer so that real datagrams are lost. Filter is an
// eBPF socket filter (SO_ATTACH_BPF, built with github.com/cilium/ebpf,
// no compiler needed) that applies the first, cheap checks of the router's
// outside path in the kernel:
//
//   - shorter than 4 bytes, a transport message shorter than 32 or a
//     relay message shorter than 40: runt;
//   - a type other than 1..5, or a transport or relay message with
//     non-zero reserved bytes: unknown type;
//   - a handshake message (types 1, 2, 3) of the wrong size: bad size;
//   - a transport or relay message whose receiver index is not one of
//     ours, unless it comes from a configured peer endpoint (the router
//     uses those to notice a peer that still has a session we forgot):
//     unknown index;
//   - an initiation or response from a source address the router blocked
//     with Block (it sent handshake messages with a bad MAC faster than an
//     honest gateway ever does), unless it comes from a configured peer
//     endpoint: blocked. The MAC itself is checked in userspace only.
//
// Everything else, and anything the program cannot read, is passed on; the
// router applies every check again, so the filter only ever moves work
// into the kernel and never decides alone that a datagram is good.
// Coalesced (GSO/GRO) datagrams, whose later segments the program cannot
// see, are always passed on.
//
// Counts: every drop is counted by reason in a per-CPU array; Counts sums
// them. The router adds them to its own drop counters, so operators see one
// set of numbers whichever side dropped.
//
// The receiver indices live in a hash map the router keeps current
// (AddIndex before a session can receive, RemoveIndex when it is retired).
// A failed update must not let the filter drop a live session's traffic:
// callers Detach the filter on any AddIndex or SetEndpoints error and run
// without it.
//
// Concurrency: all methods are safe for concurrent use.
package earlydrop
