package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Errors returned by Parse. They are sentinels: compare with errors.Is.
var (
	// ErrTooShort means the buffer ends before the fixed IP header (or,
	// for IPv4, before the header length it announces).
	ErrTooShort = errors.New("packet: too short for an IP header")
	// ErrBadVersion means the version field is neither 4 nor 6.
	ErrBadVersion = errors.New("packet: IP version is not 4 or 6")
	// ErrBadHeaderLen means an IPv4 IHL below 5 (20 bytes).
	ErrBadHeaderLen = errors.New("packet: IPv4 header length below 20 bytes")
	// ErrBadLength means the length field is smaller than the header or
	// larger than the buffer.
	ErrBadLength = errors.New("packet: IP length field inconsistent with the buffer")
)

// Header sizes and protocol numbers used throughout the package.
const (
	IPv4HeaderLen = 20 // minimum IPv4 header
	IPv6HeaderLen = 40 // fixed IPv6 header

	ProtoICMP   = 1
	ProtoTCP    = 6
	ProtoUDP    = 17
	ProtoICMPv6 = 58
)

// Info describes the IP header of a packet.
type Info struct {
	Version      uint8      // 4 or 6
	Src, Dst     netip.Addr // source and destination addresses
	Length       int        // total packet length from the header (IPv4 total length, IPv6 40+payload length)
	Protocol     uint8      // IPv4 protocol / IPv6 next header (first header only)
	HeaderLen    int        // IPv4 IHL*4, IPv6 40
	DontFragment bool       // IPv4 DF bit; always true for IPv6
	// FragmentOffset is the IPv4 fragment offset in bytes (0 for IPv6,
	// whose fragment header is not examined).
	FragmentOffset int
	// MoreFragments is the IPv4 MF bit (false for IPv6).
	MoreFragments bool
}

// Parse validates b as one IP packet, which may be followed by padding
// (bytes past Info.Length are ignored): the version is 4 or 6; for IPv4 the
// IHL is at least 5, the header fits in b, and the total length is at least
// the header length and at most len(b); for IPv6 40+payload length is at
// most len(b). It does not verify the IPv4 header checksum (see Checksum)
// or look past the first header. It does not allocate.
func Parse(b []byte) (Info, error) {
	if len(b) == 0 {
		return Info{}, ErrTooShort
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) < IPv4HeaderLen {
			return Info{}, ErrTooShort
		}
		hl := int(b[0]&0x0f) * 4
		if hl < IPv4HeaderLen {
			return Info{}, ErrBadHeaderLen
		}
		if hl > len(b) {
			return Info{}, ErrTooShort
		}
		total := int(binary.BigEndian.Uint16(b[2:4]))
		if total < hl || total > len(b) {
			return Info{}, ErrBadLength
		}
		frag := binary.BigEndian.Uint16(b[6:8])
		return Info{
			Version:        4,
			Src:            netip.AddrFrom4([4]byte(b[12:16])),
			Dst:            netip.AddrFrom4([4]byte(b[16:20])),
			Length:         total,
			Protocol:       b[9],
			HeaderLen:      hl,
			DontFragment:   frag&0x4000 != 0,
			FragmentOffset: int(frag&0x1fff) * 8,
			MoreFragments:  frag&0x2000 != 0,
		}, nil
	case 6:
		if len(b) < IPv6HeaderLen {
			return Info{}, ErrTooShort
		}
		total := IPv6HeaderLen + int(binary.BigEndian.Uint16(b[4:6]))
		if total > len(b) {
			return Info{}, ErrBadLength
		}
		return Info{
			Version:      6,
			Src:          netip.AddrFrom16([16]byte(b[8:24])),
			Dst:          netip.AddrFrom16([16]byte(b[24:40])),
			Length:       total,
			Protocol:     b[6],
			HeaderLen:    IPv6HeaderLen,
			DontFragment: true,
		}, nil
	default:
		return Info{}, ErrBadVersion
	}
}

// Destination returns the destination address of the IP packet in b. It is
// the per-packet fast path: it checks only the version and that b is long
// enough to hold the fixed header, and reports false otherwise. It does not
// allocate.
func Destination(b []byte) (netip.Addr, bool) {
	if len(b) == 0 {
		return netip.Addr{}, false
	}
	switch b[0] >> 4 {
	case 4:
		if len(b) >= IPv4HeaderLen {
			return netip.AddrFrom4([4]byte(b[16:20])), true
		}
	case 6:
		if len(b) >= IPv6HeaderLen {
			return netip.AddrFrom16([16]byte(b[24:40])), true
		}
	}
	return netip.Addr{}, false
}
