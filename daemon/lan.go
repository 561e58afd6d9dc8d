package daemon

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/config"
)

// LANCheckInterval is how often the gateway checks that it can deliver to
// its own site (see lanWatch): well under a second, so /readyz and the
// remote gateways learn within one.
const LANCheckInterval = 100 * time.Millisecond

// lanProbe returns why the gateway cannot deliver to its own site under
// cfg, or "" when it can (or cfg has no lan section).
type lanProbe func(cfg *config.Config) string

// lanWatch decides, every LANCheckInterval, whether this gateway can
// deliver to its own site, and acts on a change: the router tells remote
// gateways (router.SetCanDeliver, a flag in every probe and probe reply,
// so they move its flows) and /readyz answers 503 (readiness reads
// problem), so a load balancer drains it. Only changes are logged.
//
// problem is written by run alone; any goroutine may read it.
type lanWatch struct {
	log     *slog.Logger
	cfg     func() *config.Config // the running config; reloads apply
	probe   lanProbe
	deliver func(ok bool) // router.SetCanDeliver
	// targets pings lan.targets; nil in tests that only fake the probe.
	targets *lanTargets
	problem atomic.Pointer[string]
}

// Problem is why the gateway cannot deliver to its own site, "" while it
// can.
func (w *lanWatch) Problem() string {
	if p := w.problem.Load(); p != nil {
		return *p
	}
	return ""
}

// check runs the probe once and acts on a change.
func (w *lanWatch) check() {
	cfg := w.cfg()
	p := w.probe(cfg)
	if w.targets != nil {
		// Pinged on every check, so replies are fresh when the link
		// and routes come back.
		if tp := w.targets.tick(cfg); p == "" {
			p = tp
		}
	}
	if p == w.Problem() {
		return
	}
	w.problem.Store(&p)
	w.deliver(p == "")
	if p != "" {
		w.log.Warn("cannot deliver to this site: /readyz answers 503 and remote gateways move this gateway's flows", "problem", p)
	} else {
		w.log.Info("can deliver to this site again")
	}
}

// run checks every LANCheckInterval until ctx is done.
func (w *lanWatch) run(ctx context.Context) {
	t := time.NewTicker(LANCheckInterval)
	defer t.Stop()
	if w.targets != nil {
		defer w.targets.Close()
	}
	for {
		w.check()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// netlinkLANProbe is the lanProbe of a running gateway: the LAN interface
// must exist and be up with a carrier, and the main table must route
// every nodeCIDR of the gateway's site through it. Its link going down
// takes its IPv4 connected routes with it.
func netlinkLANProbe(cfg *config.Config) string {
	if cfg.LAN == nil {
		return ""
	}
	name := cfg.LAN.Interface
	link, err := netlink.LinkByName(name)
	if err != nil {
		return fmt.Sprintf("LAN interface %s: %v", name, err)
	}
	a := link.Attrs()
	if a.Flags&net.FlagUp == 0 {
		return fmt.Sprintf("LAN interface %s is down", name)
	}
	if a.OperState != netlink.OperUp && a.OperState != netlink.OperUnknown {
		return fmt.Sprintf("LAN interface %s has no carrier (%s)", name, a.OperState)
	}
	site := cfg.LocalSite()
	if site == nil {
		return ""
	}
	for _, pfx := range site.NodeCIDRs {
		if msg := routedVia(pfx, a.Index, name); msg != "" {
			return msg
		}
	}
	return ""
}

// routedVia returns "" when the main table has a route for all of pfx
// (not a default route) through the link with index idx, else what is
// missing. A route lookup of one address would not do: the network
// address of an IPv6 prefix is the subnet-router anycast address, which
// the kernel routes to lo, and any address may be the gateway's own.
func routedVia(pfx netip.Prefix, idx int, name string) string {
	family := netlink.FAMILY_V4
	if pfx.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	routes, err := netlink.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: idx},
		netlink.RT_FILTER_TABLE|netlink.RT_FILTER_OIF)
	if err != nil {
		return fmt.Sprintf("listing routes through %s: %v", name, err)
	}
	for _, r := range routes {
		if r.Dst == nil {
			continue // a default route says nothing about the site
		}
		dst, ok := netipx(r.Dst)
		if ok && dst.Bits() > 0 && dst.Bits() <= pfx.Bits() && dst.Contains(pfx.Addr()) {
			return ""
		}
	}
	return fmt.Sprintf("no route to nodeCIDR %s through the LAN interface %s", pfx, name)
}

// netipx converts a route destination to a prefix.
func netipx(n *net.IPNet) (netip.Prefix, bool) {
	a, ok := netip.AddrFromSlice(n.IP)
	if !ok {
		return netip.Prefix{}, false
	}
	ones, _ := n.Mask.Size()
	return netip.PrefixFrom(a.Unmap(), ones), true
}
