//go:build linux

package udp

import (
	"net/netip"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

// When the kernel refuses a segmented message, its datagrams are sent
// again as plain messages, at once and in the same Send; what happens to
// GSO afterwards depends on the error:
//
//   - EIO (the outgoing device cannot checksum), EOPNOTSUPP,
//     ENOPROTOOPT: the kernel or the device cannot segment, which
//     waiting does not change, so GSO is off for the bind for good, as
//     it always was. (The kernel also gives EIO for a segmented send
//     over an IPsec route, which is about one destination; that still
//     costs GSO for all, a known price of keeping these semantics.)
//   - EMSGSIZE (EINVAL before Linux 6.x): a segment does not fit the
//     path MTU, where a plain datagram would be fragmented. But EINVAL
//     is also what a blackhole route gives every datagram, so the
//     refusal only counts against GSO once the plain resend of the
//     message went through. Then segments of that size or larger, and
//     larger than the route to that destination allows, are sent
//     plainly for gsoRetryAfter; after that GSO is tried at full size
//     again, since routes and path MTUs change (a failed retry costs
//     one refused system call and the MTU probe per period).
//   - Anything else (ENETUNREACH, EPERM...) is about the destination
//     and leaves GSO alone.
//
// What the route allows is knowable cheaply only on the refusal: an
// unconnected socket has no IP_MTU, and a route lookup per send is not
// cheap, so the cap is learned when the kernel refuses, from a
// throwaway socket connected to the destination (pathSegment). The cap
// is per bind, the smallest path's while it lasts.

// gsoRetryAfter is how long a learned segment cap lasts.
const gsoRetryAfter = 30 * time.Second

// gsoGate decides how large a segment a send may use. It is shared by
// the sendStates of a bind: on is set at Listen and cleared for good by
// whichever Send sees the kernel unable to segment; limit is replaced
// (never modified: a new gsoCap each time) by whichever Send learns a
// smaller cap, and dropped by the first Send after it lapsed; now and
// local are set at Listen.
type gsoGate struct {
	on    atomic.Bool
	limit atomic.Pointer[gsoCap]
	now   func() time.Time
	local netip.AddrPort // the bind's address, the source for pathSegment
}

// gsoCap is a learned segment size limit: segments above maxSeg are sent
// plainly until until.
type gsoCap struct {
	maxSeg int
	until  time.Time
}

// maxSegment returns the largest segment size a send may use now: 0 for
// no GSO, maxGSOBytes without a cap. It reads the clock only while a cap
// is set.
func (g *gsoGate) maxSegment() int {
	if g == nil || !g.on.Load() {
		return 0
	}
	c := g.limit.Load()
	if c == nil {
		return maxGSOBytes
	}
	if g.now().Before(c.until) {
		return c.maxSeg
	}
	g.limit.CompareAndSwap(c, nil)
	return maxGSOBytes
}

// lower caps segments at maxSeg (or a lower cap still in force) for
// gsoRetryAfter from now.
func (g *gsoGate) lower(maxSeg int) {
	now := g.now()
	next := &gsoCap{maxSeg: max(maxSeg, 0), until: now.Add(gsoRetryAfter)}
	for {
		old := g.limit.Load()
		if old != nil && now.Before(old.until) {
			next.maxSeg = min(next.maxSeg, old.maxSeg)
		}
		if g.limit.CompareAndSwap(old, next) {
			return
		}
	}
}

// gsoFailed handles the kernel refusing the segmented message s.off with
// errno: that message's datagrams are rebuilt as plain messages (the
// rest of the chunk too if GSO is now off for good) to be sent next, one
// datagram each; the refusal is held against GSO as the comment above
// says.
func (s *sendState) gsoFailed(errno unix.Errno) {
	m, d := s.off, s.first[s.off]
	end := d + int(s.hdrs[m].Hdr.Iovlen)
	switch errno {
	case unix.EIO, unix.EOPNOTSUPP, unix.ENOPROTOOPT:
		s.sh.gso.on.Store(false)
		s.maxSeg = 0
	case unix.EMSGSIZE, unix.EINVAL:
		s.suspect, s.suspectSeg = m, len(s.bufs[d])
	}
	s.n = s.build(m, d, end)
}

// gsoRefused runs when the plain resend of the message refused with
// EMSGSIZE or EINVAL went through (message s.suspect): the refusal was
// about segmenting. It caps segments below the refused size and at what
// the route to that destination allows, and has the rest of the chunk
// rebuilt with the cap (s.capped).
func (s *sendState) gsoRefused() {
	limit := s.suspectSeg - 1
	if p, ok := pathSegment(s.dest(s.first[s.suspect]), s.sh.gso.local); ok {
		limit = min(limit, p)
	}
	s.sh.gso.lower(limit)
	s.maxSeg = min(s.maxSeg, limit)
	s.suspect, s.capped = -1, true
}

// pathSegment returns the largest UDP segment the route to ep takes
// without fragmenting (its MTU less the IP and UDP headers), asking a
// socket connected to ep (IP_MTU, IPV6_MTU) and bound to the bind's
// address if it has one of ep's family. It costs four system calls and
// runs on a refusal only. It reports false if the kernel does not say.
func pathSegment(ep, local netip.AddrPort) (int, bool) {
	a, src := ep.Addr().Unmap(), local.Addr().Unmap()
	family, level, opt, hdr := unix.AF_INET, unix.IPPROTO_IP, unix.IP_MTU, 20+8
	var to, from unix.Sockaddr
	switch {
	case a.Is4():
		to = &unix.SockaddrInet4{Port: int(ep.Port()), Addr: a.As4()}
		if src.Is4() && !src.IsUnspecified() {
			from = &unix.SockaddrInet4{Addr: src.As4()}
		}
	case a.Is6():
		zone, err := zoneIndex(a.Zone())
		if err != nil {
			return 0, false
		}
		family, level, opt, hdr = unix.AF_INET6, unix.IPPROTO_IPV6, unix.IPV6_MTU, 40+8
		to = &unix.SockaddrInet6{Port: int(ep.Port()), Addr: a.As16(), ZoneId: zone}
		if src.Is6() && !src.IsUnspecified() {
			from = &unix.SockaddrInet6{Addr: src.As16()}
		}
	default:
		return 0, false
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, false
	}
	defer unix.Close(fd)
	if from != nil && unix.Bind(fd, from) != nil {
		return 0, false
	}
	if unix.Connect(fd, to) != nil {
		return 0, false
	}
	mtu, err := unix.GetsockoptInt(fd, level, opt)
	if err != nil || mtu <= hdr {
		return 0, false
	}
	return mtu - hdr, true
}
