package packet

import "encoding/binary"

// FlowHash returns a 64-bit hash of the flow b belongs to, keyed by seed:
// the 5-tuple (addresses, protocol, ports) for TCP, UDP, SCTP, UDP-Lite and
// DCCP; the 3-tuple (addresses, protocol) for every other protocol and
// for IPv6 packets whose first header is an extension header other than
// a fragment header. A first fragment (IPv4 offset 0 with MF set, or an
// IPv6 fragment header at offset 0) carries the transport header and
// hashes like the unfragmented packets of its flow. A later fragment
// carries no ports: it hashes by the 3-tuple, and FlowHashFragment tells
// the caller how to map it to its first fragment's hash instead.
//
// b must start with an IP header; ok is false when it is too short for
// one. The hash is not cryptographic: seed keeps outsiders from choosing
// flows that collide. It does not allocate.
func FlowHash(b []byte, seed uint64) (h uint64, ok bool) {
	h, _, _, ok = FlowHashFragment(b, seed)
	return h, ok
}

// Fragment says whether a packet is a fragment of a larger datagram.
type Fragment uint8

const (
	// NotFragment is a whole datagram.
	NotFragment Fragment = iota
	// FirstFragment is the fragment at offset 0, with the transport
	// header, of a datagram that has more.
	FirstFragment
	// LaterFragment is a fragment at a non-zero offset: no ports.
	LaterFragment
)

// FlowHashFragment is FlowHash, and for a fragment also its kind and a
// key, keyed by seed, shared by every fragment of one datagram (addresses,
// protocol and identification). A caller that keeps the hash of each
// first fragment by its key can give the later fragments the same hash,
// so a flow that mixes whole and fragmented datagrams stays on one path.
// key is 0 for NotFragment and never 0 otherwise. It does not allocate.
func FlowHashFragment(b []byte, seed uint64) (h, key uint64, frag Fragment, ok bool) {
	if len(b) == 0 {
		return 0, 0, NotFragment, false
	}
	var proto uint8
	var l4 []byte // transport header when ports count, else nil
	var id uint64 // identification of a fragment
	h = seed
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return 0, 0, NotFragment, false
		}
		ihl := int(b[0]&0x0f) * 4
		proto = b[9]
		h = mix(h, uint64(binary.BigEndian.Uint32(b[12:16]))<<32|uint64(binary.BigEndian.Uint32(b[16:20])))
		fo := binary.BigEndian.Uint16(b[6:8])
		switch {
		case fo&0x1fff != 0:
			frag = LaterFragment
		case fo&0x2000 != 0:
			frag = FirstFragment
		}
		if frag != NotFragment {
			id = uint64(binary.BigEndian.Uint16(b[4:6]))
		}
		if frag != LaterFragment && ihl >= IPv4HeaderLen && len(b) >= ihl+4 {
			l4 = b[ihl:]
		}
	case 6:
		if len(b) < IPv6HeaderLen {
			return 0, 0, NotFragment, false
		}
		proto = b[6]
		h = mix(h, binary.BigEndian.Uint64(b[8:16]))
		h = mix(h, binary.BigEndian.Uint64(b[16:24]))
		h = mix(h, binary.BigEndian.Uint64(b[24:32]))
		h = mix(h, binary.BigEndian.Uint64(b[32:40]))
		next := b[IPv6HeaderLen:]
		if proto == protoIPv6Fragment && len(b) >= IPv6HeaderLen+ipv6FragmentLen {
			// The fragment header: next header, reserved, offset
			// (13 bits) and M, identification.
			fh := b[IPv6HeaderLen:]
			proto = fh[0]
			fo := binary.BigEndian.Uint16(fh[2:4])
			switch {
			case fo>>3 != 0:
				frag = LaterFragment
			case fo&1 != 0:
				frag = FirstFragment
			} // offset 0 without M: an atomic fragment, a whole datagram
			if frag != NotFragment {
				id = uint64(binary.BigEndian.Uint32(fh[4:8]))
			}
			next = b[IPv6HeaderLen+ipv6FragmentLen:]
		}
		if frag != LaterFragment && len(next) >= 4 {
			l4 = next
		}
	default:
		return 0, 0, NotFragment, false
	}
	if frag != NotFragment {
		key = mix(h, uint64(proto)<<32|id|1<<63) | 1
	}
	var ports uint64
	switch proto {
	case ProtoTCP, ProtoUDP, protoDCCP, protoSCTP, protoUDPLite:
		if l4 != nil {
			ports = uint64(binary.BigEndian.Uint32(l4[:4]))
		}
	}
	return mix(h, uint64(proto)<<32|ports), key, frag, true
}

const (
	protoIPv6Fragment = 44
	ipv6FragmentLen   = 8
)

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
