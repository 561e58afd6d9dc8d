package router

import "github.com/bridgehead/bridgehead/steer"

// Sparse flows and the express lane.
//
// A bulk flow keeps a standing queue in every FIFO on its way that it
// shares with others: the receiving gateway's socket, read by one lane,
// holds milliseconds of it, and a ping or a DNS answer of another flow
// hashed to the same lane waits behind all of it (the fair queue only
// orders the sender's own backlog). So the reader of each inside lane
// sorts flows as they come: a flow that sends little (sparseRate with a
// burst of sparseBurst, a token bucket per flow hash bucket, each packet
// costing sparsePacketCost more than its size) is sparse,
// and its packets skip the fair queue: the reader seals and sends them at
// once, with lane byte udp.ExpressLane toward a gateway that said it has
// an express lane (flagExpress). Its kernel steers them to a socket of
// their own (udp.ListenExpress) that an outside loop of its own reads,
// idle but for sparse flows, so it runs as soon as one arrives.
//
// A flow that outgrows its bucket becomes bulk and goes through the fair
// queue and the lanes from then on; its express packets left before, so
// nothing is reordered. It is sparse again only after sparseQuiet
// without a packet, longer than a packet waits in the fair queue (its
// MaxDelay) or, in practice, in a lane's socket; so a flow does not
// overtake its own packets either. Two flows in one bucket share it: a
// sparse flow beside a bulk one is bulk (one in sparseBuckets).
//
// The express lane is the receiver's, not a priority: a gateway that
// floods it with many sparse flows delays only those flows.

const (
	// sparseBuckets is the number of flow hash buckets per lane.
	sparseBuckets = 1024
	// sparseRate and sparseBurst are a sparse flow's token bucket:
	// about 1 Mbit/s, and a TCP handshake and a small request or
	// response at once.
	sparseRate  = 128 << 10 // bytes per second
	sparseBurst = 16 << 10  // bytes
	// sparsePacketCost is added to each packet's size in its bucket,
	// so that a flow of many small packets is bulk: the ACKs of a fast
	// bulk flow send few bytes but hundreds of packets a second, which
	// would crowd the express lane (a flow of 64-byte packets is sparse
	// up to about 230 a second; a ping every 20 ms is 50).
	// The kernel's sorter (package steer) charges the same.
	sparsePacketCost = steer.DefaultPacketCost // bytes
	// sparseQuiet is how long a bulk flow must be silent to be sparse
	// again.
	sparseQuiet = int64(200e6) // ns
	// sparseRefill is how long an empty bucket takes to fill.
	sparseRefill = int64(sparseBurst) * 1e9 / sparseRate
)

// sparseFlows sorts one inside lane's flows into sparse and bulk. Its
// reader goroutine owns it: no lock.
type sparseFlows struct {
	b [sparseBuckets]sparseBucket
}

type sparseBucket struct {
	last   int64 // time of the bucket's last packet (monotonic ns); 0: never
	tokens int32 // bytes the flow may still send as sparse
	bulk   bool
}

// sparse books a packet of size bytes of flow at ns and reports whether
// the flow is sparse. It allocates nothing.
func (s *sparseFlows) sparse(flow uint64, size int, ns int64) bool {
	b := &s.b[flow%sparseBuckets]
	size += sparsePacketCost
	gap := ns - b.last
	if b.last == 0 || gap < 0 {
		gap = sparseQuiet
	}
	b.last = ns
	if b.bulk {
		if gap < sparseQuiet {
			return false
		}
		b.bulk = false
	}
	if gap >= sparseRefill {
		b.tokens = sparseBurst
	} else {
		b.tokens = int32(min(int64(sparseBurst), int64(b.tokens)+gap*sparseRate/1e9))
	}
	if int(b.tokens) >= size {
		b.tokens -= int32(size)
		return true
	}
	b.bulk = true
	return false
}
