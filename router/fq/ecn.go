package fq

import "github.com/bridgehead/bridgehead/packet"

// ECN field values (RFC 3168) in the low two bits of the IPv4 TOS byte or
// the IPv6 traffic class.
const (
	ecnNotECT = 0
	ecnCE     = 3
)

// ECT reports whether pkt, an IPv4 or IPv6 packet, is ECN-capable: its
// ECN field is ECT(0), ECT(1) or already CE. Anything too short or of
// another version is not.
func ECT(pkt []byte) bool {
	return ecnField(pkt) > ecnNotECT
}

func ecnField(pkt []byte) int {
	if len(pkt) < 2 {
		return ecnNotECT
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) < 20 {
			return ecnNotECT
		}
		return int(pkt[1] & 3)
	case 6:
		if len(pkt) < 40 {
			return ecnNotECT
		}
		return int(pkt[1]>>4) & 3
	}
	return ecnNotECT
}

// MarkCE sets the ECN field of an ECN-capable packet to CE (congestion
// experienced) and reports whether the packet now carries CE. For IPv4 it
// fixes the header checksum incrementally (RFC 1624); IPv6 has none. A
// packet that is not ECN-capable is left alone: it must be dropped
// instead. It does not allocate.
func MarkCE(pkt []byte) bool {
	switch ecnField(pkt) {
	case ecnNotECT:
		return false
	case ecnCE:
		return true
	}
	if pkt[0]>>4 == 4 {
		old := uint16(pkt[0])<<8 | uint16(pkt[1])
		pkt[1] |= ecnCE
		sum := uint16(pkt[10])<<8 | uint16(pkt[11])
		sum = packet.UpdateChecksum(sum, old, uint16(pkt[0])<<8|uint16(pkt[1]))
		pkt[10], pkt[11] = byte(sum>>8), byte(sum)
		return true
	}
	pkt[1] |= ecnCE << 4
	return true
}
