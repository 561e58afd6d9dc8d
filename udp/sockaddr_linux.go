//go:build linux

package udp

import (
	"errors"
	"net"
	"net/netip"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

var (
	errFamily  = errors.New("udp: IPv6 destination on an IPv4 socket")
	errBadAddr = errors.New("udp: invalid destination address")
)

// sockaddr is storage for either socket address family. It is an
// RawSockaddrInet6, which is larger than RawSockaddrInet4 and shares its
// leading family and port fields.
type sockaddr = unix.RawSockaddrInet6

// putPort stores port in network byte order, as the kernel expects.
func putPort(dst *uint16, port uint16) {
	b := (*[2]byte)(unsafe.Pointer(dst))
	b[0], b[1] = byte(port>>8), byte(port)
}

// getPort reads a port stored in network byte order.
func getPort(src *uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(src))
	return uint16(b[0])<<8 | uint16(b[1])
}

// encodeSockaddr writes ep into sa for a socket of the given family and
// returns the address length to pass to the kernel. On an IPv6 socket IPv4
// destinations become v4-mapped addresses; on an IPv4 socket v4-mapped
// destinations are unmapped and real IPv6 ones are rejected. It does not
// allocate unless ep has a non-numeric zone, which needs an interface lookup.
func encodeSockaddr(sa *sockaddr, ep netip.AddrPort, v6 bool) (uint32, error) {
	a := ep.Addr()
	if !a.IsValid() || ep.Port() == 0 {
		return 0, errBadAddr
	}
	if !v6 {
		a = a.Unmap()
		if !a.Is4() {
			return 0, errFamily
		}
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		*sa4 = unix.RawSockaddrInet4{Family: unix.AF_INET, Addr: a.As4()}
		putPort(&sa4.Port, ep.Port())
		return unix.SizeofSockaddrInet4, nil
	}
	scope, err := zoneIndex(a.Zone())
	if err != nil {
		return 0, err
	}
	*sa = sockaddr{Family: unix.AF_INET6, Addr: a.As16(), Scope_id: scope}
	putPort(&sa.Port, ep.Port())
	return unix.SizeofSockaddrInet6, nil
}

// decodeSockaddr returns the address the kernel stored in sa, with v4-mapped
// IPv6 addresses unmapped. An unknown family yields the zero AddrPort. It
// allocates nothing for IPv4 or global IPv6 sources; link-local IPv6 sources
// get their scope as a numeric zone.
func decodeSockaddr(sa *sockaddr) netip.AddrPort {
	switch sa.Family {
	case unix.AF_INET:
		sa4 := (*unix.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(sa4.Addr), getPort(&sa4.Port))
	case unix.AF_INET6:
		a := netip.AddrFrom16(sa.Addr).Unmap()
		if sa.Scope_id != 0 && a.Is6() {
			a = a.WithZone(strconv.FormatUint(uint64(sa.Scope_id), 10))
		}
		return netip.AddrPortFrom(a, getPort(&sa.Port))
	}
	return netip.AddrPort{}
}

// zoneIndex turns an IPv6 zone (numeric or an interface name) into a scope
// ID. Numeric zones are parsed without allocating.
func zoneIndex(zone string) (uint32, error) {
	if zone == "" {
		return 0, nil
	}
	if n, err := strconv.ParseUint(zone, 10, 32); err == nil {
		return uint32(n), nil
	}
	ifi, err := net.InterfaceByName(zone)
	if err != nil {
		return 0, err
	}
	return uint32(ifi.Index), nil
}
