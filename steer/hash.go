package steer

import "encoding/binary"

// LaneHash is the hash the steering program picks a bulk flow's queue by,
// written in Go for the router, which derives the lane byte of a packet
// it seals from the same hash (see Lane): ok is false for a packet the
// program cannot parse (it puts it on queue 0). It allocates nothing.
//
// It is symmetric and unkeyed, so that both directions of a connection
// and every gateway of the cluster get the same value: a connection's
// packets then take one lane at each gateway, both ways. Gateway A
// steers the packets of a connection to queue Lane(h) % n and seals them
// with lane byte Lane(h), which the receiving gateway's kernel steers to
// its socket Lane(h) % n (udp.ListenLanes); it writes them to that lane's
// TUN queue, and its own program steers the replies (the same h) to that
// same queue, whose lane seals them with lane byte Lane(h) again. Without
// a steering program the TUN's own flow table kept this affinity (it sends
// a flow's packets to the queue its replies were written to); with gateways
// of equal lane counts this keeps it too. (It did not win back the
// throughput that steering costs on two lanes, bench/README.md.)
//
// The flow key is the program's: addresses, protocol and, for TCP, UDP,
// SCTP and UDP-Lite (not in an IPv4 fragment), ports, with each pair
// (source, destination) combined by a sum, so that swapping them keeps
// the hash. Unkeyed, anyone who can send from a pod can choose which lane
// its flows take; they cannot choose which flows are sparse (buckets are
// keyed, Config.Seed). Why that is kept: the package doc.
func LaneHash(pkt []byte) (h uint32, ok bool) {
	if len(pkt) < 1 {
		return 0, false
	}
	word := func(off int) uint32 { return binary.BigEndian.Uint32(pkt[off:]) }
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return 0, false
		}
		h = mix(h, word(12)+word(16))
		h = mix(h, uint32(pkt[9]))
		ihl := int(pkt[0]&0xf) * 4
		if hasPorts(pkt[9]) && binary.BigEndian.Uint16(pkt[6:])&0x3fff == 0 && ihl >= 20 && ihl+4 <= len(pkt) {
			h = mix(h, portSum(word(ihl)))
		}
	case 6:
		if len(pkt) < 40 {
			return 0, false
		}
		for off := 8; off < 24; off += 4 {
			h = mix(h, word(off)+word(off+16))
		}
		h = mix(h, uint32(pkt[6]))
		if hasPorts(pkt[6]) && len(pkt) >= 44 {
			h = mix(h, portSum(word(40)))
		}
	default:
		return 0, false
	}
	return fmix32(h), true
}

// Lane is the lane of a flow with LaneHash h: 1..254, the lane byte the
// router seals its packets with; the kernel steers a bulk flow to queue
// Lane(h) % n, and a receiving gateway to socket Lane(h) % n.
func Lane(h uint32) uint32 { return 1 + h%254 }

// bucketOf is the flow bucket of a flow with LaneHash h under seed.
func bucketOf(h, seed uint32) uint32 { return fmix32(h^seed) % Buckets }

func hasPorts(proto byte) bool { return proto == 6 || proto == 17 || proto == 132 || proto == 136 }

// portSum combines the source and destination ports of a ports word.
func portSum(w uint32) uint32 { return w>>16 + w&0xffff }

func mix(h, w uint32) uint32 {
	h ^= w
	h *= mixMul
	return h ^ h>>16
}

func fmix32(h uint32) uint32 {
	h ^= h >> 16
	h *= fmix1
	h ^= h >> 13
	h *= fmix2
	return h ^ h>>16
}
