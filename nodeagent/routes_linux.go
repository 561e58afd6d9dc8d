package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// RouteProtocol tags every route the agent installs (rtm_protocol; `ip
// route show proto 66`). The agent lists, replaces and deletes routes of
// this protocol only, so routes of the kernel, DHCP, the gateway or an
// operator are never touched. 66 is not assigned in iproute2's rt_protos.
const RouteProtocol netlink.RouteProtocol = 66

// Routes keeps the node's routes in the main table equal to a desired
// list. Its methods may be called from one goroutine at a time (the
// agent's loop); Watch runs its own goroutine and only signals.
type Routes struct {
	h  *netlink.Handle
	ns *netns.NsHandle // for Watch; nil: the current namespace
	// wanted holds the destinations of the last Set, which Watch's
	// goroutine reads to recognise a foreign route replacing ours.
	wanted atomic.Pointer[map[netip.Prefix]bool]
}

// NewRoutes manages the routes through h; ns names the namespace h works
// in for the notifications Watch subscribes to (nil: the current one).
func NewRoutes(h *netlink.Handle, ns *netns.NsHandle) *Routes {
	return &Routes{h: h, ns: ns}
}

// RouteChange counts what one Set did.
type RouteChange struct {
	Added, Replaced, Deleted int
}

// Changed reports whether Set changed anything.
func (c RouteChange) Changed() bool { return c.Added+c.Replaced+c.Deleted > 0 }

// List returns the installed routes of RouteProtocol in the main table,
// sorted by destination.
func (r *Routes) List() ([]Route, error) {
	var out []Route
	for _, fam := range []int{unix.AF_INET, unix.AF_INET6} {
		rs, err := r.h.RouteListFiltered(fam, &netlink.Route{Protocol: RouteProtocol, Table: unix.RT_TABLE_MAIN},
			netlink.RT_FILTER_PROTOCOL|netlink.RT_FILTER_TABLE)
		if err != nil {
			return nil, fmt.Errorf("list routes: %w", err)
		}
		for _, nr := range rs {
			if rt, ok := fromNetlink(nr); ok {
				out = append(out, rt)
			}
		}
	}
	slices.SortFunc(out, func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) })
	return out, nil
}

func fromNetlink(nr netlink.Route) (Route, bool) {
	if nr.Dst == nil {
		return Route{}, false
	}
	a, ok := netip.AddrFromSlice(nr.Dst.IP)
	if !ok {
		return Route{}, false
	}
	ones, _ := nr.Dst.Mask.Size()
	rt := Route{Destination: netip.PrefixFrom(a.Unmap(), ones)}
	addVia := func(ip net.IP) {
		if v, ok := netip.AddrFromSlice(ip); ok {
			rt.Vias = append(rt.Vias, v.Unmap())
		}
	}
	if nr.Gw != nil {
		addVia(nr.Gw)
	}
	for _, nh := range nr.MultiPath {
		addVia(nh.Gw)
	}
	rt.Vias = sortedAddrs(rt.Vias)
	return rt, true
}

func toNetlink(rt Route) *netlink.Route {
	p := rt.Destination
	nr := &netlink.Route{
		Dst:      &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())},
		Protocol: RouteProtocol,
		Table:    unix.RT_TABLE_MAIN,
	}
	if p.Addr().Is4() {
		nr.Family = unix.AF_INET
	} else {
		nr.Family = unix.AF_INET6
	}
	if len(rt.Vias) == 1 {
		nr.Gw = rt.Vias[0].AsSlice()
		return nr
	}
	for _, v := range rt.Vias {
		nr.MultiPath = append(nr.MultiPath, &netlink.NexthopInfo{Gw: v.AsSlice()})
	}
	return nr
}

// Set makes the routes of RouteProtocol equal want: it adds the missing
// ones, replaces those whose next hops differ and deletes the ones not in
// want. Routes that are already right are not touched, so a second Set
// with the same list changes nothing. Every route is tried; the error
// joins the failures (a next hop not on any link, say), each naming its
// route.
func (r *Routes) Set(want []Route) (RouteChange, error) {
	var ch RouteChange
	have, err := r.List()
	if err != nil {
		return ch, err
	}
	installed := make(map[netip.Prefix]Route, len(have))
	for _, h := range have {
		installed[h.Destination] = h
	}
	var errs []error
	wanted := make(map[netip.Prefix]bool, len(want))
	for _, w := range want {
		wanted[w.Destination] = true
	}
	r.wanted.Store(&wanted) // read-only from here on
	for _, w := range want {
		h, ok := installed[w.Destination]
		if ok && slices.Equal(h.Vias, w.Vias) {
			continue
		}
		if err := r.h.RouteReplace(toNetlink(w)); err != nil {
			errs = append(errs, fmt.Errorf("route %s (%s): %w", w, w.Why, err))
			continue
		}
		if ok {
			ch.Replaced++
		} else {
			ch.Added++
		}
	}
	for _, h := range have {
		if wanted[h.Destination] {
			continue
		}
		if err := r.h.RouteDel(toNetlink(h)); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("delete route %s: %w", h, err))
			continue
		}
		ch.Deleted++
	}
	return ch, errors.Join(errs...)
}

// Flush deletes every route of RouteProtocol (uninstall).
func (r *Routes) Flush() (int, error) {
	ch, err := r.Set(nil)
	return ch.Deleted, err
}

// Watch subscribes to route notifications until ctx ends and signals on
// changed (without blocking) when a route of RouteProtocol is deleted or
// a route of another protocol appears for a destination of the last Set
// (it may have replaced ours). Errors reach onErr until ctx ends. It returns once subscribed; if the kernel drops the
// subscription (a full socket buffer), it signals and subscribes again,
// so nothing is missed for long; the caller's periodic Set covers the
// gap and what the kernel never announces (IPv4 routes removed with
// their link).
func (r *Routes) Watch(ctx context.Context, changed chan<- struct{}, onErr func(error)) error {
	report := func(err error) {
		if ctx.Err() == nil && onErr != nil { // closing the socket at the end fails its read
			onErr(err)
		}
	}
	sub := func() (chan netlink.RouteUpdate, chan struct{}, error) {
		updates := make(chan netlink.RouteUpdate, 64)
		done := make(chan struct{})
		err := netlink.RouteSubscribeWithOptions(updates, done, netlink.RouteSubscribeOptions{
			Namespace:     r.ns,
			ErrorCallback: report,
		})
		if err != nil {
			close(done)
			return nil, nil, fmt.Errorf("subscribe to route changes: %w", err)
		}
		return updates, done, nil
	}
	updates, done, err := sub()
	if err != nil {
		return err
	}
	signal := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	go func() {
		defer func() { close(done) }()
		for {
			select {
			case <-ctx.Done():
				return
			case u, ok := <-updates:
				if !ok {
					signal()
					close(done)
					var err error
					if updates, done, err = sub(); err != nil {
						report(err)
						done = make(chan struct{})
						<-ctx.Done()
						return
					}
					continue
				}
				if r.affects(u) {
					signal()
				}
			}
		}
	}()
	return nil
}

// affects reports whether a route notification may mean one of ours is
// gone: ours deleted, or another route for one of our destinations added.
func (r *Routes) affects(u netlink.RouteUpdate) bool {
	if u.Route.Protocol == RouteProtocol {
		return u.Type == unix.RTM_DELROUTE
	}
	if u.Type != unix.RTM_NEWROUTE || u.Route.Table != unix.RT_TABLE_MAIN {
		return false
	}
	rt, ok := fromNetlink(u.Route)
	if !ok {
		return false
	}
	w := r.wanted.Load()
	return w != nil && (*w)[rt.Destination]
}
