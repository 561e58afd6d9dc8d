//go:build linux

package udp

import (
	"fmt"
	"net/netip"
)

// MaxLanes is the most sockets ListenLanes opens on one port.
const MaxLanes = 64

// ListenLanes opens n UDP sockets bound to the same address and port with
// SO_REUSEPORT, each a LinuxBind with opts, so that n goroutines can
// receive in parallel. The kernel gives each datagram to one of them by a
// hash of its source and destination addresses and ports: the datagrams of
// one peer's source port all reach one socket, in order, and peers (or one
// peer's several source ports) spread over the sockets. A datagram sent
// from any of them leaves from the shared port. Port 0 picks a free port
// for the first socket; the others join it.
//
// When a socket of the group closes, the kernel rehashes the remaining
// ones: close them together. The caller owns the binds. On error nothing
// stays open.
func ListenLanes(addr netip.AddrPort, n int, opts Options) ([]*LinuxBind, error) {
	if n < 1 || n > MaxLanes {
		return nil, fmt.Errorf("udp: %d sockets outside [1, %d]", n, MaxLanes)
	}
	opts.reusePort = true
	binds := make([]*LinuxBind, 0, n)
	for i := range n {
		b, err := Listen(addr, opts)
		if err != nil {
			for _, b := range binds {
				_ = b.Close()
			}
			return nil, fmt.Errorf("udp: socket %d of %d on %v: %w", i+1, n, addr, err)
		}
		binds = append(binds, b)
		addr = netip.AddrPortFrom(addr.Addr(), b.LocalAddr().Port())
	}
	return binds, nil
}
