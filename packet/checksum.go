package packet

import (
	"encoding/binary"
	"net/netip"
)

// Sum adds the bytes of b, as big-endian 16-bit words, to the partial
// Internet checksum sum initial (RFC 1071) and returns the new partial sum,
// folded to 16 bits. An odd final byte is padded with zero, so when summing
// a message in several pieces every piece but the last must have even
// length. Start with 0 or a PseudoHeaderSum. It does not allocate.
func Sum(b []byte, initial uint32) uint32 {
	acc := uint64(initial)
	// Adding 32-bit words and folding later gives the same one's
	// complement sum, because 1<<16 is congruent to 1 modulo 0xffff.
	for len(b) >= 8 {
		acc += uint64(binary.BigEndian.Uint32(b)) + uint64(binary.BigEndian.Uint32(b[4:]))
		b = b[8:]
	}
	for len(b) >= 2 {
		acc += uint64(binary.BigEndian.Uint16(b))
		b = b[2:]
	}
	if len(b) == 1 {
		acc += uint64(b[0]) << 8
	}
	return fold(acc)
}

func fold(acc uint64) uint32 {
	for acc > 0xffff {
		acc = acc&0xffff + acc>>16
	}
	return uint32(acc)
}

// Checksum returns the Internet checksum of b on top of the partial sum
// initial: the one's complement of their one's complement sum, ready to
// store in a header whose checksum field was zero while b was summed.
// Checksum over a message that already carries a correct checksum returns
// 0, which is how a receiver verifies one. It does not allocate.
func Checksum(b []byte, initial uint32) uint16 {
	return ^uint16(Sum(b, initial))
}

// PseudoHeaderSum returns the partial sum of the TCP/UDP/ICMPv6
// pseudo-header for a transport message of the given length: the IPv4
// pseudo-header (RFC 793) if both addresses are IPv4, the IPv6 one (RFC
// 8200 section 8.1) otherwise. It does not allocate.
func PseudoHeaderSum(src, dst netip.Addr, proto uint8, length int) uint32 {
	var acc uint64
	if src.Is4() && dst.Is4() {
		s, d := src.As4(), dst.As4()
		acc = uint64(binary.BigEndian.Uint32(s[:])) + uint64(binary.BigEndian.Uint32(d[:]))
		acc += uint64(proto) + uint64(uint16(length))
		return fold(acc)
	}
	s, d := src.As16(), dst.As16()
	for i := 0; i < 16; i += 4 {
		acc += uint64(binary.BigEndian.Uint32(s[i:])) + uint64(binary.BigEndian.Uint32(d[i:]))
	}
	acc += uint64(uint32(length)) + uint64(proto)
	return fold(acc)
}

// UpdateChecksum returns the checksum sum adjusted for one 16-bit word of
// the covered data changing from old to new, by RFC 1624 equation 3:
// HC' = ~(~HC + ~m + m'). The word must sit at an even offset from the
// start of the checksummed data; for a word at an odd offset pass old and
// new byte-swapped. It does not allocate.
func UpdateChecksum(sum, old, new uint16) uint16 {
	acc := uint64(^sum) + uint64(^old) + uint64(new)
	return ^uint16(fold(acc))
}
