// Package fq is a per-flow fair queue with CoDel, for the packets a
// gateway has read from its TUN and not yet sealed.
//
// It is fq_codel's design (RFC 8290) over slots the caller owns:
//
//   - Packets live in the caller's buffers; the queue holds their slot
//     numbers (0 to Config.Packets-1) in one FIFO per flow bucket. Every
//     array is allocated by New: enqueueing and dequeueing allocate
//     nothing and copy no packet.
//   - A packet's bucket is its flow hash (the one the gateway selector
//     ranks gateways by, router.flowHasher) modulo Config.Flows. Packets of
//     one flow share a bucket and leave in the order they came.
//   - Buckets are served by deficit round robin, Config.Quantum bytes a
//     turn. A bucket that becomes active goes to the new list, served
//     before the old list: a sparse flow (a ping, a DNS query, a 100 Hz
//     request/response) waits for the batch being sent, not behind the
//     backlog of a bulk flow. A new bucket that has used its quantum, or
//     emptied, moves to the old list, so a flow cannot stay "new" by
//     sending just fast enough.
//   - Every bucket runs CoDel (RFC 8289) on the time its head packet has
//     waited: when that stays above Config.Target for Config.Interval, the
//     head packet is dropped (or, with Config.ECN and an ECN-capable inner
//     packet, returned with mark set, for the caller to set CE with
//     MarkCE), then again at intervals shrinking with the square root of
//     the drop count, until the delay falls below the target. TCP backs
//     off instead of filling the queue.
//   - Bounds: Config.Bytes in all buckets together and Config.Packets
//     slots; over either, packets are dropped from the head of the bucket
//     holding the most bytes (the bulk flow pays, not the flow that
//     arrives). A head packet older than Config.MaxDelay is dropped
//     whatever CoDel says, so an unresponsive flow cannot hold a slot for
//     long.
//
// Every packet that leaves without being dequeued is handed to
// Config.Drop with its reason, so the caller gets its slot back and counts
// it. The Queue is not safe for concurrent use: the caller serializes
// Enqueue, Dequeue and the rest (the router holds one lock around a batch).
// Time is the caller's monotonic clock in nanoseconds.
package fq
