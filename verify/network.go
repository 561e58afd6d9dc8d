package verify

import (
	"context"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"time"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Network is the I/O the checks need. SystemNetwork is the real one;
// tests pass a fake. Methods may be called from one goroutine at a time.
type Network interface {
	// Ping sends one ICMP echo request of size bytes (the whole IP
	// packet) from src to dst with don't-fragment set, and returns the
	// round trip of the reply.
	Ping(ctx context.Context, src, dst netip.Addr, size int, timeout time.Duration) (time.Duration, error)
	// Dial opens a TCP connection from src (when valid) to dst.
	Dial(ctx context.Context, src netip.Addr, dst netip.AddrPort, timeout time.Duration) (net.Conn, error)
	// Route is the kernel's route toward dst.
	Route(dst netip.Addr) (Route, error)
	// Sysctl reads a value under /proc/sys ("net/ipv4/ip_forward").
	Sysctl(name string) (string, error)
	// LinkMTU is the MTU of the named interface.
	LinkMTU(name string) (int, error)
	// Lookup resolves name's addresses by asking only the DNS server.
	Lookup(ctx context.Context, server netip.AddrPort, name string, timeout time.Duration) ([]netip.Addr, error)
}

// TooBigError is Ping's error when a router on the way answered the echo
// with ICMP "fragmentation needed" (IPv6: "packet too big"): the path
// carries MTU bytes and says so, so path-MTU discovery works.
type TooBigError struct {
	From netip.Addr // the router that answered
	MTU  int
}

func (e *TooBigError) Error() string {
	return fmt.Sprintf("%s answered: too big, mtu %d", e.From, e.MTU)
}

// Route is where the kernel sends a destination.
type Route struct {
	Dev string
	Via netip.Addr // next hop; invalid for a direct route
}

// tooBig reports whether msg (an ICMP message, no IP header) is an IPv4
// "fragmentation needed" or an ICMPv6 "packet too big" about our echo
// (id, seq) to dst, and the MTU it gives.
func tooBig(msg []byte, dst netip.Addr, id, seq int) (int, bool) {
	if len(msg) < 8 {
		return 0, false
	}
	var mtu int
	var orig []byte
	switch {
	case dst.Is4() && msg[0] == 3 && msg[1] == 4:
		mtu, orig = int(binary.BigEndian.Uint16(msg[6:8])), msg[8:]
		if len(orig) < 20 {
			return 0, false
		}
		hl := int(orig[0]&0x0f) * 4
		if hl < 20 || len(orig) < hl+8 || orig[9] != 1 || netip.AddrFrom4([4]byte(orig[16:20])) != dst {
			return 0, false
		}
		orig = orig[hl:]
		if orig[0] != byte(ipv4.ICMPTypeEcho) {
			return 0, false
		}
	case dst.Is6() && msg[0] == 2:
		mtu, orig = int(binary.BigEndian.Uint32(msg[4:8])), msg[8:]
		if len(orig) < 48 || orig[6] != 58 || netip.AddrFrom16([16]byte(orig[24:40])) != dst {
			return 0, false
		}
		orig = orig[40:]
		if orig[0] != byte(ipv6.ICMPTypeEchoRequest) {
			return 0, false
		}
	default:
		return 0, false
	}
	if int(binary.BigEndian.Uint16(orig[4:6])) != id || int(binary.BigEndian.Uint16(orig[6:8])) != seq {
		return 0, false
	}
	return mtu, true
}
