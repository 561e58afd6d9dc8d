// Package setupqueue is the bounded queue that holds a peer's packets
// while its session is being set up, so that the first packets of a flow
// are not lost to the handshake: the router's inside path pushes (behind
// anything still queued, to keep the order), the handshake loop drains
// the queue through the new session or clears it when the setup gives
// up. It imports nothing of bridgehead's.
package setupqueue
