package verify

import (
	"context"
	"net"
	"net/netip"
	"time"
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

// Route is where the kernel sends a destination.
type Route struct {
	Dev string
	Via netip.Addr // next hop; invalid for a direct route
}
