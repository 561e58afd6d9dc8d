package netsetup

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// watchBufSize is the receive buffer of the route notification socket:
// room for the deletions of a whole large catalog (a link going down
// flushes its IPv6 routes one notification each) before it overruns.
const watchBufSize = 16 << 20

// watchLogInterval is the most often WatchRoutes logs its repairs.
const watchLogInterval = time.Minute

// WatchRoutes keeps the routes this Setup installed without listing the
// route table: it subscribes to the kernel's route notifications and, as
// soon as one reports a route of ours deleted (by an operator, another
// routing daemon, a flush), puts just that route back. Repairs cost what
// was deleted, not the size of the table, where a full check (Apply)
// dumps every route: 0.5 s of CPU at 100k prefixes.
//
// The kernel flushes a link's routes when it goes down, IPv4 ones
// without a notification each; and notifications can be lost (the socket
// overran, or failed). For both, the watch calls resync (from its
// goroutine, with no lock of Setup held), which should Apply the whole
// wanted state: that brings the link up and puts every route back. When
// notifications were lost it subscribes again before calling resync. A
// caller should still Apply now and then as a backstop.
//
// It returns once subscribed; the watch runs on its own goroutine until
// ctx is done or the Setup is closed. The subscription is made in the
// Setup's network namespace, whichever thread calls it.
func (s *Setup) WatchRoutes(ctx context.Context, resync func()) error {
	sub, err := s.subscribe()
	if err != nil {
		return err
	}
	go s.watch(ctx, sub, resync)
	return nil
}

// subscription is the route and link notification sockets.
type subscription struct {
	routes chan netlink.RouteUpdate
	links  chan netlink.LinkUpdate
	done   chan struct{} // closing it closes both sockets
}

func (s *Setup) subscribe() (*subscription, error) {
	s.mu.Lock() // s.ns stays open
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("netsetup: WatchRoutes after Close")
	}
	sub := &subscription{routes: make(chan netlink.RouteUpdate, 1024), links: make(chan netlink.LinkUpdate, 64), done: make(chan struct{})}
	onErr := func(err error) { s.log.Debug("route notifications", "err", err) }
	err := netlink.RouteSubscribeWithOptions(sub.routes, sub.done, netlink.RouteSubscribeOptions{
		Namespace:              &s.ns,
		ReceiveBufferSize:      watchBufSize,
		ReceiveBufferForceSize: true, // past rmem_max; needs CAP_NET_ADMIN, which Setup needs anyway
		ErrorCallback:          onErr,
	})
	if err != nil {
		close(sub.done)
		return nil, fmt.Errorf("subscribe to route notifications: %w", err)
	}
	err = netlink.LinkSubscribeWithOptions(sub.links, sub.done, netlink.LinkSubscribeOptions{Namespace: &s.ns, ErrorCallback: onErr})
	if err != nil {
		close(sub.done)
		return nil, fmt.Errorf("subscribe to link notifications: %w", err)
	}
	return sub, nil
}

func (s *Setup) watch(ctx context.Context, sub *subscription, resync func()) {
	defer func() { close(sub.done) }()
	// lost handles a failed socket (an overrun): what changed meanwhile
	// is unknown. It subscribes again first, so that nothing deleted
	// after the resync goes unseen; false when the watch is over.
	lost := func() bool {
		close(sub.done)
		if sub = s.resubscribe(ctx); sub == nil {
			sub = &subscription{done: make(chan struct{})} // for the deferred close
			return false
		}
		s.log.Warn("route notifications were lost; checking every route")
		resync()
		return true
	}
	batch := make([]netlink.RouteUpdate, 0, 256)
	for {
		select {
		case <-ctx.Done():
			return
		case l, ok := <-sub.links:
			if !ok {
				if !lost() {
					return
				}
				continue
			}
			// Our link down flushes its routes, IPv4 ones without a
			// notification each: Apply brings it up and puts them
			// back, as the periodic check did.
			if s.ourLinkDown(l) {
				s.log.Warn("tunnel link went down; bringing it up and restoring its routes", "link", l.Attrs().Name)
				resync()
			}
		case u, ok := <-sub.routes:
			if !ok {
				if !lost() {
					return
				}
				continue
			}
			batch = append(batch[:0], u)
		more: // what else arrived: one repair for a burst of deletions
			for len(batch) < cap(batch) {
				select {
				case u, ok := <-sub.routes:
					if !ok {
						break more
					}
					batch = append(batch, u)
				default:
					break more
				}
			}
			if s.repair(batch) {
				return // closed
			}
		}
	}
}

// ourLinkDown reports whether l says the link Apply configures is down.
func (s *Setup) ourLinkDown(l netlink.LinkUpdate) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || s.link == "" || int(l.Index) != s.linkIndex {
		return false
	}
	return l.Header.Type == unix.RTM_NEWLINK && l.Flags&unix.IFF_UP == 0
}

// resubscribe subscribes again until it works, the Setup is closed or ctx
// is done (nil then).
func (s *Setup) resubscribe(ctx context.Context) *subscription {
	for {
		if ctx.Err() != nil || s.isClosed() {
			return nil
		}
		sub, err := s.subscribe()
		if err == nil {
			return sub
		}
		s.log.Error("route notifications unavailable; retrying", "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (s *Setup) isClosed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// repair puts back the routes of ours that batch reports deleted. It
// reports whether the Setup is closed.
func (s *Setup) repair(batch []netlink.RouteUpdate) (closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return true
	}
	if s.link == "" {
		return false // nothing applied yet
	}
	var tunnel []netip.Prefix
	var via []ViaRoute
	for _, u := range batch {
		if u.Type != unix.RTM_DELROUTE || u.Table != syscall.RT_TABLE_MAIN {
			continue
		}
		p, gw, ok := routeOf(u.Route)
		if !ok {
			continue
		}
		switch {
		case gw.IsValid():
			// Ours only with our next hop: what Apply replaced
			// or removed is no longer in s.via as it was.
			if have, ok := s.via[p]; ok && have == gw {
				via = append(via, ViaRoute{p, gw})
			}
		case u.LinkIndex == s.linkIndex && s.tunnel[p]:
			tunnel = append(tunnel, p)
		}
	}
	if len(tunnel)+len(via) == 0 {
		return false
	}
	slices.SortFunc(tunnel, func(a, b netip.Prefix) int { return a.Addr().Compare(b.Addr()) })
	tunnel = slices.Compact(tunnel)
	failed := 0
	var firstErr error
	fail := func(err error) {
		if failed++; firstErr == nil {
			firstErr = err
		}
	}
	for _, err := range s.rs.replaceTunnel(s.linkIndex, tunnel) {
		if err != nil {
			fail(err)
		}
	}
	for _, v := range via {
		if err := s.h.RouteReplace(viaRoute(v.Prefix, v.Via)); err != nil {
			fail(err)
		}
	}
	n := len(tunnel) + len(via)
	s.repaired.Add(uint64(n - failed))
	s.repairFailed.Add(uint64(failed))
	// One line now and then, however often routes are deleted (another
	// routing daemon fighting over them would otherwise flood the log).
	s.unlogged += n
	s.unloggedFailed += failed
	now := time.Now()
	if now.Sub(s.lastRepairLog) >= watchLogInterval {
		attrs := []any{"routes", s.unlogged, "failed", s.unloggedFailed, "example", exampleRoute(tunnel, via)}
		if firstErr != nil {
			attrs = append(attrs, "err", firstErr)
		}
		s.log.Warn("kernel routes of ours were deleted; put back", attrs...)
		s.lastRepairLog, s.unlogged, s.unloggedFailed = now, 0, 0
	}
	return false
}

// routeOf returns the prefix and next hop (invalid for a link route) of a
// route with the default metric, as Apply installs them.
func routeOf(r netlink.Route) (netip.Prefix, netip.Addr, bool) {
	if r.Dst == nil || r.Priority != 0 && !(r.Dst.IP.To4() == nil && r.Priority == 1024) {
		return netip.Prefix{}, netip.Addr{}, false
	}
	ip, ok := netip.AddrFromSlice(r.Dst.IP)
	if !ok {
		return netip.Prefix{}, netip.Addr{}, false
	}
	ones, _ := r.Dst.Mask.Size()
	p := netip.PrefixFrom(ip.Unmap(), ones)
	var gw netip.Addr
	if r.Gw != nil {
		if a, ok := netip.AddrFromSlice(r.Gw); ok {
			gw = a.Unmap()
		}
	}
	return p, gw, true
}

func exampleRoute(tunnel []netip.Prefix, via []ViaRoute) string {
	if len(tunnel) > 0 {
		return tunnel[0].String()
	}
	return via[0].Prefix.String() + " via " + via[0].Via.String()
}
