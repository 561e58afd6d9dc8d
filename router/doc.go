// Package router is the forwarding core of bridgehead.
//
// The data path is split the way trusted userspace tunnels split it:
//
//   - the inside loop reads plain packets from the TUN device in batches,
//     looks the destination up in a longest-prefix-match table of every
//     site's node and pod CIDRs, seals each packet in place for one gateway
//     of the destination site and hands runs of packets for the same
//     gateway to the UDP bind in one call;
//   - the outside loop reads datagrams in batches, finds the session by
//     its receiver index, authenticates and decrypts in place, checks the
//     replay window, checks that the inner source belongs to the sending
//     gateway's site and that the destination is local, and writes the
//     packets to the TUN in one call;
//   - the handshake loop owns all handshake state: it answers initiations,
//     completes its own, retransmits, gives up, and flushes the packets
//     queued while a session was being set up.
//
// Buffers are allocated once per loop; a packet is never copied on the way
// through except when it has to wait in a peer's bounded queue for a
// handshake. Routing state (table, sites, peers) is immutable once
// published and swapped whole with SetConfig through an atomic pointer, so
// the hot path takes no lock for it. Sessions are found through a
// copy-on-write index map, also read without locks.
//
// Every packet that is not forwarded is counted by direction and reason
// (see Reason); nothing is logged per packet. A summary of new drops is
// logged at most once per DropLogInterval.
//
// Time comes from an injected Clock so tests drive timers without sleeping.
package router
