package sparse

import "github.com/bridgehead/bridgehead/steer"

const (
	// Buckets is the number of flow hash buckets per lane.
	Buckets = 1024
	// Rate and Burst are a sparse flow's token bucket:
	// about 1 Mbit/s, and a TCP handshake and a small request or
	// response at once.
	Rate  = 128 << 10 // bytes per second
	Burst = 16 << 10  // bytes
	// PacketCost is added to each packet's size in its bucket,
	// so that a flow of many small packets is bulk: the ACKs of a fast
	// bulk flow send few bytes but hundreds of packets a second, which
	// would crowd the express lane (a flow of 64-byte packets is sparse
	// up to about 230 a second; a ping every 20 ms is 50).
	// The kernel's sorter (package steer) charges the same.
	PacketCost = steer.DefaultPacketCost // bytes
	// Quiet is how long a bulk flow must be silent to be sparse
	// again.
	Quiet = int64(200e6) // ns
	// refill is how long an empty bucket takes to fill.
	refill = int64(Burst) * 1e9 / Rate
)

// Flows sorts one inside lane's flows into sparse and bulk. Its
// reader goroutine owns it: no lock. The zero Flows is ready.
type Flows struct {
	b [Buckets]bucket
}

type bucket struct {
	last   int64 // time of the bucket's last packet (monotonic ns); 0: never
	tokens int32 // bytes the flow may still send as sparse
	bulk   bool
}

// Sparse books a packet of size bytes of flow at ns and reports whether
// the flow is sparse. It allocates nothing.
func (s *Flows) Sparse(flow uint64, size int, ns int64) bool {
	b := &s.b[flow%Buckets]
	size += PacketCost
	gap := ns - b.last
	if b.last == 0 || gap < 0 {
		gap = Quiet
	}
	b.last = ns
	if b.bulk {
		if gap < Quiet {
			return false
		}
		b.bulk = false
	}
	if gap >= refill {
		b.tokens = Burst
	} else {
		b.tokens = int32(min(int64(Burst), int64(b.tokens)+gap*Rate/1e9))
	}
	if int(b.tokens) >= size {
		b.tokens -= int32(size)
		return true
	}
	b.bulk = true
	return false
}
