// Package sparse sorts one inside lane's flows into sparse and bulk, for
// the router's express lane.
//
// A bulk flow keeps a standing queue in every FIFO on its way that it
// shares with others: the receiving gateway's socket, read by one lane,
// holds milliseconds of it, and a ping or a DNS answer of another flow
// hashed to the same lane waits behind all of it (the fair queue only
// orders the sender's own backlog). So the reader of each inside lane
// sorts flows as they come: a flow that sends little (Rate with a
// burst of Burst, a token bucket per flow hash bucket, each packet
// costing PacketCost more than its size) is sparse,
// and its packets skip the fair queue: the reader seals and sends them at
// once, with lane byte udp.ExpressLane toward a gateway that said it has
// an express lane (the router's flagExpress). Its kernel steers them to a socket of
// their own (udp.ListenExpress) that an outside loop of its own reads,
// idle but for sparse flows, so it runs as soon as one arrives.
//
// A flow that outgrows its bucket becomes bulk and goes through the fair
// queue and the lanes from then on; its express packets left before, so
// nothing is reordered. It is sparse again only after Quiet
// without a packet, longer than a packet waits in the fair queue (its
// MaxDelay) or, in practice, in a lane's socket; so a flow does not
// overtake its own packets either. Two flows in one bucket share it: a
// sparse flow beside a bulk one is bulk (one in Buckets).
//
// The express lane is the receiver's, not a priority: a gateway that
// floods it with many sparse flows delays only those flows.
//
// It imports only package steer (whose kernel sorter charges the same
// per-packet cost); package router gives each inside lane's reader a
// Flows and keeps the express lane's sealing and sending.
package sparse
