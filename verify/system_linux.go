package verify

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// SystemNetwork is the host's network: raw ICMP sockets (root or
// CAP_NET_RAW), TCP, netlink and /proc/sys.
type SystemNetwork struct{}

// Ping implements Network. The probe leaves with don't-fragment and
// ignores the kernel's cached path MTU (IP_PMTUDISC_PROBE), so a size
// larger than the path answers nothing instead of being fragmented.
func (SystemNetwork) Ping(ctx context.Context, src, dst netip.Addr, size int, timeout time.Duration) (time.Duration, error) {
	return ping(ctx, src, dst, size, timeout, false)
}

// ping is Ping; dgram skips the raw socket and uses a datagram one.
func ping(ctx context.Context, src, dst netip.Addr, size int, timeout time.Duration, dgram bool) (time.Duration, error) {
	network, listen, proto, hdr := "ip4:icmp", "0.0.0.0", 1, 20
	var reqType, replyType icmp.Type = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply
	if dst.Is6() {
		network, listen, proto, hdr = "ip6:ipv6-icmp", "::", 58, 40
		reqType, replyType = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply
	}
	if src.IsValid() {
		listen = src.String()
	}
	payload := size - hdr - 8
	if payload < 8 {
		return 0, fmt.Errorf("ping: size %d too small", size)
	}
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			if dst.Is6() {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
				}
			} else {
				serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
			}
		})
		if err != nil {
			return err
		}
		return serr
	}}
	var pc net.PacketConn
	var err error
	if !dgram {
		pc, err = lc.ListenPacket(ctx, network, listen)
	}
	unprivileged := false
	if dgram || errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
		// No CAP_NET_RAW (a pod of the restricted Pod Security level):
		// an ICMP datagram socket, which net.ipv4.ping_group_range allows.
		pc, err = dgramICMP(src, dst)
		unprivileged = true
	}
	if err != nil {
		return 0, fmt.Errorf("ping: %w", err)
	}
	defer pc.Close()
	var idb [4]byte
	rand.Read(idb[:])
	id, seq := int(binary.BigEndian.Uint16(idb[:2])), int(binary.BigEndian.Uint16(idb[2:]))
	msg := icmp.Message{Type: reqType, Body: &icmp.Echo{ID: id, Seq: seq, Data: make([]byte, payload)}}
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice()}
	if unprivileged {
		to = &net.UDPAddr{IP: dst.AsSlice()}
	}
	if _, err := pc.WriteTo(b, to); err != nil {
		return 0, err
	}
	deadline := start.Add(timeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	pc.SetReadDeadline(deadline)
	buf := make([]byte, 65536)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return 0, err
		}
		var fromIP net.IP
		switch f := from.(type) {
		case *net.IPAddr:
			fromIP = f.IP
		case *net.UDPAddr:
			fromIP = f.IP
		}
		a, ok := netip.AddrFromSlice(fromIP)
		if !ok {
			continue
		}
		if mtu, ok := tooBig(buf[:n], dst, id, seq); ok {
			return 0, &TooBigError{From: a.Unmap(), MTU: mtu}
		}
		if a.Unmap() != dst {
			continue
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil || m.Type != replyType {
			continue
		}
		// A datagram socket's echoes carry the kernel's identifier (it
		// demultiplexes replies by it), not ours.
		if e, ok := m.Body.(*icmp.Echo); ok && (e.ID == id || unprivileged) && e.Seq == seq {
			return time.Since(start), nil
		}
	}
}

// dgramICMP opens an ICMP datagram socket ("ping socket", no CAP_NET_RAW
// needed when the group is in net.ipv4.ping_group_range) toward dst with
// don't-fragment and no cached path MTU, bound to src when valid. Errors
// (too big) are not read from it: a path that is too small shows as a
// size that gets no answer.
func dgramICMP(src, dst netip.Addr) (net.PacketConn, error) {
	family, proto := unix.AF_INET, unix.IPPROTO_ICMP
	if dst.Is6() {
		family, proto = unix.AF_INET6, unix.IPPROTO_ICMPV6
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, proto)
	if err != nil {
		return nil, fmt.Errorf("icmp datagram socket (is this group in net.ipv4.ping_group_range?): %w", err)
	}
	if dst.Is6() {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_MTU_DISCOVER, unix.IPV6_PMTUDISC_PROBE)
		if err == nil {
			err = unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_DONTFRAG, 1)
		}
	} else {
		err = unix.SetsockoptInt(fd, unix.IPPROTO_IP, unix.IP_MTU_DISCOVER, unix.IP_PMTUDISC_PROBE)
	}
	if err == nil && src.IsValid() {
		if src.Is4() {
			err = unix.Bind(fd, &unix.SockaddrInet4{Addr: src.As4()})
		} else {
			err = unix.Bind(fd, &unix.SockaddrInet6{Addr: src.As16()})
		}
	}
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "icmp")
	defer f.Close()
	return net.FilePacketConn(f)
}

// Dial implements Network.
func (SystemNetwork) Dial(ctx context.Context, src netip.Addr, dst netip.AddrPort, timeout time.Duration) (net.Conn, error) {
	d := net.Dialer{Timeout: timeout}
	if src.IsValid() {
		d.LocalAddr = &net.TCPAddr{IP: src.AsSlice()}
	}
	return d.DialContext(ctx, "tcp", dst.String())
}

// Route implements Network with netlink's route lookup (ip route get).
func (SystemNetwork) Route(dst netip.Addr) (Route, error) {
	routes, err := netlink.RouteGet(dst.AsSlice())
	if err != nil {
		return Route{}, err
	}
	if len(routes) == 0 {
		return Route{}, fmt.Errorf("no route to %s", dst)
	}
	r := routes[0]
	var out Route
	if link, err := netlink.LinkByIndex(r.LinkIndex); err == nil {
		out.Dev = link.Attrs().Name
	}
	if a, ok := netip.AddrFromSlice(r.Gw); ok {
		out.Via = a.Unmap()
	}
	return out, nil
}

// Sysctl implements Network.
func (SystemNetwork) Sysctl(name string) (string, error) {
	b, err := os.ReadFile(filepath.Join("/proc/sys", name))
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}

// LinkMTU implements Network.
func (SystemNetwork) LinkMTU(name string) (int, error) {
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return 0, err
	}
	return ifc.MTU, nil
}

// Lookup implements Network with Go's resolver, every query sent to
// server (UDP, TCP for truncated answers).
func (SystemNetwork) Lookup(ctx context.Context, server netip.AddrPort, name string, timeout time.Duration) ([]netip.Addr, error) {
	r := &net.Resolver{PreferGo: true, Dial: func(ctx context.Context, network, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, network, server.String())
	}}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A fully qualified name: the search list of resolv.conf is not used.
	return r.LookupNetIP(ctx, "ip", strings.TrimSuffix(name, ".")+".")
}
