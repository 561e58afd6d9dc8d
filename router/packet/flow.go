package packet

import "encoding/binary"

// FlowHash returns a 64-bit hash of the flow b belongs to, keyed by seed:
// the 5-tuple (addresses, protocol, ports) for TCP, UDP, SCTP, UDP-Lite and
// DCCP; the 3-tuple (addresses, protocol) for every other protocol, for
// IPv4 fragments (whose later pieces carry no ports) and for IPv6 packets
// whose first header is an extension header. Every packet of a flow, its
// fragments included, therefore hashes alike, so a flow can be pinned to
// one path without reordering.
//
// b must start with an IP header; ok is false when it is too short for
// one. The hash is not cryptographic: seed keeps outsiders from choosing
// flows that collide. It does not allocate.
func FlowHash(b []byte, seed uint64) (h uint64, ok bool) {
	if len(b) == 0 {
		return 0, false
	}
	var proto uint8
	var l4 []byte // transport header when ports count, else nil
	h = seed
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return 0, false
		}
		ihl := int(b[0]&0x0f) * 4
		proto = b[9]
		h = mix(h, uint64(binary.BigEndian.Uint32(b[12:16]))<<32|uint64(binary.BigEndian.Uint32(b[16:20])))
		frag := binary.BigEndian.Uint16(b[6:8])
		if frag&0x3fff == 0 && ihl >= IPv4HeaderLen && len(b) >= ihl+4 {
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < IPv6HeaderLen {
			return 0, false
		}
		proto = b[6]
		h = mix(h, binary.BigEndian.Uint64(b[8:16]))
		h = mix(h, binary.BigEndian.Uint64(b[16:24]))
		h = mix(h, binary.BigEndian.Uint64(b[24:32]))
		h = mix(h, binary.BigEndian.Uint64(b[32:40]))
		if len(b) >= IPv6HeaderLen+4 {
			l4 = b[IPv6HeaderLen:]
		}
	default:
		return 0, false
	}
	var ports uint64
	switch proto {
	case ProtoTCP, ProtoUDP, protoDCCP, protoSCTP, protoUDPLite:
		if l4 != nil {
			ports = uint64(binary.BigEndian.Uint32(l4[:4]))
		}
	}
	return mix(h, uint64(proto)<<32|ports), true
}

const (
	protoDCCP    = 33
	protoSCTP    = 132
	protoUDPLite = 136
)

// mix folds v into h with a multiply-xorshift round (the finalizer of
// SplitMix64): fast, and every input bit affects every output bit.
func mix(h, v uint64) uint64 {
	h ^= v
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 31
	h *= 0x94d049bb133111eb
	h ^= h >> 29
	return h
}

// Mix is exported for callers that rank candidates for a flow
// (rendezvous hashing): Mix(flowHash, candidateKey).
func Mix(h, v uint64) uint64 { return mix(h, v) }
