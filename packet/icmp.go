package packet

import (
	"encoding/binary"
	"math"
	"net/netip"
)

const (
	icmpHeaderLen = 8

	// Largest ICMP error datagrams: RFC 1812 section 4.3.2.3 (IPv4) and
	// RFC 4443 section 2.4 (IPv6, the minimum MTU).
	maxErrorLen4 = 576
	maxErrorLen6 = 1280

	// Smallest MTUs worth announcing: RFC 791 and RFC 8200.
	minMTU4 = 68
	minMTU6 = 1280

	icmp4Unreachable     = 3
	icmp4FragNeeded      = 4
	icmp6PacketTooBig    = 2
	icmp6FirstInfoType   = 128
	tosInternetControl   = 0xc0 // IP precedence 6 for ICMP errors (RFC 1812 4.3.2.5 / Linux)
	errorTTL             = 64
	ipv6ExtHopByHop      = 0
	ipv6ExtRouting       = 43
	ipv6ExtFragment      = 44
	ipv6ExtAH            = 51
	ipv6ExtDestOpts      = 60
	maxIPv6ExtHeaderWalk = 8
)

// ICMPTooBig writes into dst the ICMP error that tells the sender of orig
// its packet was too big for a link of the given MTU: for IPv4 a
// "destination unreachable, fragmentation needed" (type 3 code 4) carrying
// the next-hop MTU (RFC 1191), for IPv6 a "packet too big" (type 2) carrying
// the MTU (RFC 4443). The error goes from src to the source of orig and
// quotes orig (without any padding after it) as far as RFC 1812 allows for
// IPv4 (576 bytes in all) and RFC 4443 for IPv6 (1280 in all), further
// limited by len(dst) but never below the IP header plus 8 bytes (or all of
// orig if shorter). IP and ICMP checksums are filled in, the ICMPv6 one over
// the pseudo-header. dst may alias orig: orig is fully read before the
// headers are written.
//
// It returns the number of bytes written, or 0, writing nothing, if: orig
// fails Parse; src is not of orig's family (an IPv4-mapped src counts as
// IPv4); mtu is out of range (IPv4: 68..65535; IPv6: 1280..2^32-1); dst
// cannot hold the minimum quote; orig is itself an ICMP error or carries
// one (never answer an error with an error), or its type cannot be read;
// orig's source is unspecified, multicast, loopback or (IPv4) the limited
// broadcast address; or (IPv4 only, RFC 1812 4.3.2.7) orig is a non-initial
// fragment or addressed to a multicast or the limited broadcast address.
// The caller decides when a packet deserves the error (for IPv4, only
// with DF set). It does not allocate.
func ICMPTooBig(dst []byte, orig []byte, src netip.Addr, mtu int) int {
	info, err := Parse(orig)
	if err != nil {
		return 0
	}
	if info.Version == 4 {
		return tooBig4(dst, orig, &info, src.Unmap(), mtu)
	}
	return tooBig6(dst, orig, &info, src, mtu)
}

func tooBig4(dst, orig []byte, info *Info, src netip.Addr, mtu int) int {
	if !src.Is4() || mtu < minMTU4 || mtu > math.MaxUint16 ||
		info.FragmentOffset != 0 || !validErrorSource(info.Src) ||
		info.Dst.IsMulticast() || isBroadcast4(info.Dst) {
		return 0
	}
	if info.Protocol == ProtoICMP && !isICMP4Query(orig, info) {
		return 0
	}
	const hdr = IPv4HeaderLen + icmpHeaderLen
	q, ok := quoteLen(len(dst)-hdr, maxErrorLen4-hdr, info)
	if !ok {
		return 0
	}
	n := hdr + q
	copy(dst[hdr:n], orig[:q]) // first, in case dst aliases orig

	ip := dst[:IPv4HeaderLen]
	ip[0] = 0x45
	ip[1] = tosInternetControl
	binary.BigEndian.PutUint16(ip[2:], uint16(n))
	clear(ip[4:8]) // identification, flags, fragment offset
	ip[8] = errorTTL
	ip[9] = ProtoICMP
	clear(ip[10:12])
	s, d := src.As4(), info.Src.As4()
	copy(ip[12:16], s[:])
	copy(ip[16:20], d[:])
	binary.BigEndian.PutUint16(ip[10:], Checksum(ip, 0))

	m := dst[IPv4HeaderLen:n]
	m[0] = icmp4Unreachable
	m[1] = icmp4FragNeeded
	clear(m[2:6]) // checksum, unused
	binary.BigEndian.PutUint16(m[6:], uint16(mtu))
	binary.BigEndian.PutUint16(m[2:], Checksum(m, 0))
	return n
}

func tooBig6(dst, orig []byte, info *Info, src netip.Addr, mtu int) int {
	if !src.Is6() || src.Is4In6() || mtu < minMTU6 || int64(mtu) > math.MaxUint32 ||
		!validErrorSource(info.Src) || carriesICMP6Error(orig, info) {
		return 0
	}
	const hdr = IPv6HeaderLen + icmpHeaderLen
	q, ok := quoteLen(len(dst)-hdr, maxErrorLen6-hdr, info)
	if !ok {
		return 0
	}
	n := hdr + q
	copy(dst[hdr:n], orig[:q]) // first, in case dst aliases orig

	src = src.WithZone("")
	ip := dst[:IPv6HeaderLen]
	ip[0] = 0x60
	clear(ip[1:4]) // traffic class, flow label
	binary.BigEndian.PutUint16(ip[4:], uint16(n-IPv6HeaderLen))
	ip[6] = ProtoICMPv6
	ip[7] = errorTTL
	s, d := src.As16(), info.Src.As16()
	copy(ip[8:24], s[:])
	copy(ip[24:40], d[:])

	m := dst[IPv6HeaderLen:n]
	m[0] = icmp6PacketTooBig
	m[1] = 0
	clear(m[2:4])
	binary.BigEndian.PutUint32(m[4:], uint32(mtu))
	sum := PseudoHeaderSum(src, info.Src, ProtoICMPv6, len(m))
	binary.BigEndian.PutUint16(m[2:], Checksum(m, sum))
	return n
}

// quoteLen returns how many bytes of the packet to quote given the room in
// dst and the protocol limit, or false if not even the minimum fits.
func quoteLen(room, limit int, info *Info) (int, bool) {
	q := min(info.Length, limit, room)
	return q, q >= min(info.Length, info.HeaderLen+8)
}

// validErrorSource reports whether an ICMP error may be sent to a.
func validErrorSource(a netip.Addr) bool {
	return a.IsValid() && !a.IsUnspecified() && !a.IsMulticast() && !a.IsLoopback() && !isBroadcast4(a)
}

func isBroadcast4(a netip.Addr) bool {
	return a == netip.AddrFrom4([4]byte{255, 255, 255, 255})
}

// isICMP4Query reports whether the ICMPv4 message in the packet is a query
// or reply rather than an error, which is what makes it answerable. A
// message too short to have a type is treated as an error.
func isICMP4Query(b []byte, info *Info) bool {
	if info.HeaderLen >= info.Length {
		return false
	}
	switch b[info.HeaderLen] {
	case 0, 8, // echo reply, echo request
		9, 10, // router advertisement, solicitation
		13, 14, // timestamp, timestamp reply
		15, 16, // information request, reply
		17, 18: // address mask request, reply
		return true
	}
	return false
}

// carriesICMP6Error follows the IPv6 extension headers of the packet to an
// ICMPv6 message and reports whether it is an error message (type below
// 128) or too short to tell. A chain that is truncated, too long, reaches
// another upper layer, or continues in a non-initial fragment carries no
// visible ICMPv6 message and reports false.
func carriesICMP6Error(b []byte, info *Info) bool {
	next, off, end := info.Protocol, IPv6HeaderLen, info.Length
	for range maxIPv6ExtHeaderWalk {
		switch next {
		case ProtoICMPv6:
			return off >= end || b[off] < icmp6FirstInfoType
		case ipv6ExtHopByHop, ipv6ExtRouting, ipv6ExtDestOpts:
			if off+2 > end {
				return false
			}
			next, off = b[off], off+(int(b[off+1])+1)*8
		case ipv6ExtAH:
			if off+2 > end {
				return false
			}
			next, off = b[off], off+(int(b[off+1])+2)*4
		case ipv6ExtFragment:
			if off+8 > end || binary.BigEndian.Uint16(b[off+2:])&^7 != 0 {
				return false
			}
			next, off = b[off], off+8
		default:
			return false
		}
	}
	return false
}
