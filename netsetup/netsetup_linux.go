package netsetup

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// Want is the kernel state a gateway needs.
type Want struct {
	// Link is the TUN interface name.
	Link string
	// MTU of the TUN interface.
	MTU int
	// Tunnel lists prefixes routed into the TUN (remote sites).
	Tunnel []netip.Prefix
	// Via lists prefixes routed to a next hop on the LAN (local nodes'
	// pod ranges).
	Via []ViaRoute
	// Forwarding enables IPv4 and IPv6 forwarding.
	Forwarding bool
}

// ViaRoute is a prefix routed to a gateway address.
type ViaRoute struct {
	Prefix netip.Prefix
	Via    netip.Addr
}

// Setup is the kernel state applied so far. Safe for concurrent use.
type Setup struct {
	mu   sync.Mutex
	h    *netlink.Handle
	rs   *routeSocket   // tunnel routes, in batches
	ns   netns.NsHandle // the namespace New ran in, for WatchRoutes
	log  *slog.Logger
	link string
	// linkIndex is the index of link as of the last Apply.
	linkIndex int
	tunnel    map[netip.Prefix]bool
	via       map[netip.Prefix]netip.Addr
	// sysctlPath is where /proc/sys lives (tests point it elsewhere).
	sysctlPath string
	// closed is set by Close: the netlink handle is gone, and a netlink
	// call would quietly act on the calling thread's namespace.
	closed bool

	// Repairs by WatchRoutes: routes put back, and those that failed.
	// Any goroutine may read them.
	repaired, repairFailed atomic.Uint64
	// WatchRoutes' log pacing, under mu.
	lastRepairLog            time.Time
	unlogged, unloggedFailed int
}

// Repairs returns how many deleted routes WatchRoutes put back, and how
// many it failed to.
func (s *Setup) Repairs() (repaired, failed uint64) {
	return s.repaired.Load(), s.repairFailed.Load()
}

// New returns a Setup bound to the calling thread's network namespace.
func New(log *slog.Logger) (*Setup, error) {
	h, err := netlink.NewHandle()
	if err != nil {
		return nil, fmt.Errorf("netlink: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rs, err := openRouteSocket()
	if err != nil {
		h.Close()
		return nil, err
	}
	ns, err := netns.Get()
	if err != nil {
		h.Close()
		rs.close()
		return nil, fmt.Errorf("network namespace: %w", err)
	}
	return &Setup{
		h: h, rs: rs, ns: ns, log: log,
		tunnel:     map[netip.Prefix]bool{},
		via:        map[netip.Prefix]netip.Addr{},
		sysctlPath: "/proc/sys",
	}, nil
}

// Apply makes the kernel match w. It is idempotent; on error it reports
// every step that failed and keeps what succeeded recorded so Close can
// remove it.
func (s *Setup) Apply(w Want) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errors.New("netsetup: Apply after Close")
	}
	if s.link != "" && w.Link != s.link {
		return fmt.Errorf("link changed from %s to %s: routes on %s would be left behind", s.link, w.Link, s.link)
	}
	link, err := s.h.LinkByName(w.Link)
	if err != nil {
		return fmt.Errorf("link %s: %w", w.Link, err)
	}
	s.link = w.Link
	s.linkIndex = link.Attrs().Index
	var errs []error
	if w.MTU > 0 && link.Attrs().MTU != w.MTU {
		if err := s.h.LinkSetMTU(link, w.MTU); err != nil {
			errs = append(errs, fmt.Errorf("set MTU %d on %s: %w", w.MTU, w.Link, err))
		}
	}
	if link.Attrs().Flags&net.FlagUp == 0 {
		// A tunnel has no use for an IPv6 link-local address; without
		// one the kernel sends no router solicitations or MLD reports
		// into it, which would only show up as no_route drops.
		if err := os.WriteFile(s.sysctlPath+"/net/ipv6/conf/"+w.Link+"/addr_gen_mode", []byte("1\n"), 0o644); err != nil && !errors.Is(err, os.ErrNotExist) {
			s.log.Warn("cannot turn off IPv6 link-local address generation", "link", w.Link, "err", err)
		}
		if err := s.h.LinkSetUp(link); err != nil {
			errs = append(errs, fmt.Errorf("bring %s up: %w", w.Link, err))
		}
	}
	if w.Forwarding {
		for _, f := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
			// Written only when off: in a container /proc/sys is read-only
			// (an in-cluster gateway, whose node forwards already).
			path := s.sysctlPath + "/" + f
			if b, err := os.ReadFile(path); err == nil && strings.TrimSpace(string(b)) == "1" {
				continue
			}
			if err := os.WriteFile(path, []byte("1\n"), 0o644); err != nil {
				errs = append(errs, fmt.Errorf("enable forwarding: %w", err))
			}
		}
	}
	idx := link.Attrs().Index

	wantTunnel := map[netip.Prefix]bool{}
	for _, p := range w.Tunnel {
		wantTunnel[p.Masked()] = true
	}
	wantVia := map[netip.Prefix]netip.Addr{}
	for _, v := range w.Via {
		wantVia[v.Prefix.Masked()] = v.Via
	}
	// What the kernel has now: a route recorded as ours may have gone
	// (the link went down, someone deleted it), and must come back.
	have, prefixes, err := s.kernelRoutes()
	if err != nil {
		errs = append(errs, err)
	}
	// A route to a wanted prefix that we did not install (an operator's,
	// at the default metric) is replaced: say so, since Close will then
	// remove ours and leave the prefix without it.
	foreign := func(p netip.Prefix) {
		if _, ours := s.via[p]; prefixes[p] && !s.tunnel[p] && !ours {
			s.log.Warn("replacing a route bridgehead did not install", "prefix", p)
		}
	}
	// One log line per Apply: a catalog of 100k prefixes would otherwise
	// log 100k lines at start-up (each route is logged at debug level).
	added, removed := 0, 0
	// Install what is wanted first, and remove what is no longer wanted
	// only afterwards: RouteReplace overwrites a route to the same prefix
	// (a prefix moving between tunnel and via, a new next hop), and if it
	// fails the old route stays, so the prefix never loses its route and
	// never falls through to the default route, unencrypted.
	var install []netip.Prefix
	for _, p := range sortedKeys(wantTunnel) {
		if s.tunnel[p] && have[kernelRoute{p, idx, netip.Addr{}}] {
			continue
		}
		foreign(p)
		install = append(install, p)
	}
	for i, err := range s.rs.replaceTunnel(idx, install) {
		p := install[i]
		if err != nil {
			errs = append(errs, fmt.Errorf("route %s dev %s: %w", p, w.Link, err))
			continue
		}
		s.tunnel[p] = true
		delete(s.via, p) // replaced
		added++
		s.log.Debug("route added", "prefix", p, "dev", w.Link)
	}
	for _, p := range sortedKeys(wantVia) {
		gw := wantVia[p]
		if old, ok := s.via[p]; ok && old == gw && have[kernelRoute{p, -1, gw}] {
			continue
		}
		foreign(p)
		if err := s.h.RouteReplace(viaRoute(p, gw)); err != nil {
			errs = append(errs, fmt.Errorf("route %s via %s: %w", p, gw, err))
			continue
		}
		s.via[p] = gw
		delete(s.tunnel, p) // replaced
		added++
		s.log.Debug("route added", "prefix", p, "via", gw)
	}
	for _, p := range sortedKeys(s.tunnel) {
		if wantTunnel[p] {
			continue
		}
		if _, ok := wantVia[p]; ok {
			continue // its via route failed above; keep the tunnel route
		}
		if err := s.h.RouteDel(tunnelRoute(idx, p)); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route %s dev %s: %w", p, w.Link, err))
			continue
		}
		delete(s.tunnel, p)
		removed++
		s.log.Debug("route removed", "prefix", p, "dev", w.Link)
	}
	for _, p := range sortedKeys(s.via) {
		if _, ok := wantVia[p]; ok || wantTunnel[p] {
			continue // still wanted, or its replacement failed above
		}
		if err := s.h.RouteDel(viaRoute(p, s.via[p])); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route %s via %s: %w", p, s.via[p], err))
			continue
		}
		delete(s.via, p)
		removed++
		s.log.Debug("route removed", "prefix", p)
	}
	if added+removed > 0 {
		s.log.Info("kernel routes updated", "link", w.Link, "added", added, "removed", removed,
			"tunnel", len(s.tunnel), "via", len(s.via), "failed", len(errs))
	}
	return errors.Join(errs...)
}

// kernelRoute identifies a route of the main table: a tunnel route by its
// prefix and link (via invalid), a via route by its prefix and next hop
// (link -1).
type kernelRoute struct {
	prefix netip.Prefix
	link   int
	via    netip.Addr
}

// kernelRoutes lists the main table's routes with the default metric, the
// only ones Apply installs.
func (s *Setup) kernelRoutes() (have map[kernelRoute]bool, prefixes map[netip.Prefix]bool, err error) {
	// Each route is taken as it is parsed (the iterating form): with a
	// catalog of 100k prefixes, collecting them into a slice first cost
	// more than the dump itself, and Apply runs every 30 s.
	list := func() error {
		have, prefixes = make(map[kernelRoute]bool, len(s.tunnel)+len(s.via)), make(map[netip.Prefix]bool, len(s.tunnel)+len(s.via))
		return s.h.RouteListFilteredIter(netlink.FAMILY_ALL, &netlink.Route{Table: syscall.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE, func(r netlink.Route) bool {
			if r.Dst == nil || r.Priority != 0 && !(r.Dst.IP.To4() == nil && r.Priority == 1024) {
				return true
			}
			ip, ok := netip.AddrFromSlice(r.Dst.IP)
			if !ok {
				return true
			}
			ones, _ := r.Dst.Mask.Size()
			p := netip.PrefixFrom(ip.Unmap(), ones)
			prefixes[p] = true
			if gw, ok := netip.AddrFromSlice(r.Gw); ok && r.Gw != nil {
				have[kernelRoute{p, -1, gw.Unmap()}] = true
			} else {
				have[kernelRoute{p, r.LinkIndex, netip.Addr{}}] = true
			}
			return true
		})
	}
	// A dump that the kernel's table changed under is incomplete; try
	// again. If it keeps changing, an empty answer only means every
	// wanted route is replaced, which is harmless.
	for range 3 {
		err = list()
		if !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if errors.Is(err, netlink.ErrDumpInterrupted) {
		s.log.Warn("route table kept changing while listed; replacing every wanted route")
		return map[kernelRoute]bool{}, map[netip.Prefix]bool{}, nil
	}
	if err != nil {
		return nil, nil, fmt.Errorf("list routes: %w", err)
	}
	return have, prefixes, nil
}

// Routes returns the prefixes currently routed into the tunnel and via
// next hops, as applied by this Setup.
func (s *Setup) Routes() (tunnel []netip.Prefix, via []ViaRoute) {
	s.mu.Lock()
	defer s.mu.Unlock()
	tunnel = sortedKeys(s.tunnel)
	for _, p := range sortedKeys(s.via) {
		via = append(via, ViaRoute{Prefix: p, Via: s.via[p]})
	}
	return tunnel, via
}

// Close removes every route this Setup added. Forwarding is left on: other
// software on a gateway may rely on it. Later calls of Close do nothing;
// Apply after Close returns an error.
func (s *Setup) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	var errs []error
	if link, err := s.h.LinkByName(s.link); err == nil {
		for p := range s.tunnel {
			if err := s.h.RouteDel(tunnelRoute(link.Attrs().Index, p)); err != nil && !errors.Is(err, syscall.ESRCH) {
				errs = append(errs, fmt.Errorf("remove route %s: %w", p, err))
			}
		}
	}
	for p, gw := range s.via {
		if err := s.h.RouteDel(viaRoute(p, gw)); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("remove route %s via %s: %w", p, gw, err))
		}
	}
	clear(s.tunnel)
	clear(s.via)
	s.h.Close()
	s.rs.close()
	s.ns.Close()
	return errors.Join(errs...)
}

func tunnelRoute(linkIndex int, p netip.Prefix) *netlink.Route {
	return &netlink.Route{LinkIndex: linkIndex, Dst: ipNet(p), Scope: netlink.SCOPE_LINK}
}

func viaRoute(p netip.Prefix, gw netip.Addr) *netlink.Route {
	return &netlink.Route{Dst: ipNet(p), Gw: net.IP(gw.AsSlice())}
}

func ipNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func sortedKeys[V any](m map[netip.Prefix]V) []netip.Prefix {
	keys := make([]netip.Prefix, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return keys
}

// PathMTU returns the MTU of the interface the kernel routes dst through.
func PathMTU(dst netip.Addr) (int, error) {
	routes, err := netlink.RouteGet(net.IP(dst.AsSlice()))
	if err != nil {
		return 0, err
	}
	if len(routes) == 0 {
		return 0, fmt.Errorf("no route to %s", dst)
	}
	if routes[0].MTU > 0 {
		return routes[0].MTU, nil
	}
	link, err := netlink.LinkByIndex(routes[0].LinkIndex)
	if err != nil {
		return 0, err
	}
	return link.Attrs().MTU, nil
}
