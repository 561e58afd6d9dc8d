package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strings"
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
// cfg through side, or "" when it can (or side watches nothing).
type lanProbe func(cfg *config.Config, side lanSide) string

// lanSide is the interface the LAN watch watches under one config, and
// why: named by lan.interface, or derived from the gateway's own address.
// A plain value, compared to notice a change.
type lanSide struct {
	// Interface is the watched interface; "" watches nothing (then
	// Warning says why, unless the watch was never set up).
	Interface string
	// Derived: found as the interface that holds Addr, the gateway's
	// address in the catalog, because the config has no lan section.
	Derived bool
	Addr    netip.Addr
	// Warning is why nothing is watched.
	Warning string
}

// lanWatch decides, every LANCheckInterval, whether this gateway can
// deliver to its own site, and acts on a change: the router tells remote
// gateways (router.SetCanDeliver, a flag in every probe and probe reply,
// so they move its flows) and /readyz answers 503 (readiness reads
// problem), so a load balancer drains it. Only changes are logged.
//
// The watched interface (lanSide) is found again whenever the running
// config changes (at start and after each reload): lan.interface when the
// config has a lan section, else the interface that holds the gateway's
// own address (lanLinks.side). Each change of it is logged once.
//
// problem is written by the goroutine that calls check (Run's, then
// run's) alone; any goroutine may read it. seen and side belong to that
// goroutine.
type lanWatch struct {
	log     *slog.Logger
	cfg     func() *config.Config // the running config; reloads apply
	probe   lanProbe
	deliver func(ok bool) // router.SetCanDeliver
	// resolve finds the interface to watch under a config; nil in tests
	// that only fake the probe (then nothing is watched).
	resolve func(cfg *config.Config) lanSide
	// targets pings lan.targets; nil in tests that only fake the probe.
	targets *lanTargets
	problem atomic.Pointer[string]

	seen *config.Config // the config side was found for
	side lanSide
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
	if cfg != w.seen && w.resolve != nil {
		w.seen = cfg
		w.setSide(w.resolve(cfg))
	}
	p := w.probe(cfg, w.side)
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

// setSide makes side the watched interface and logs it when it changed:
// which interface and why, or a warning that none is watched.
func (w *lanWatch) setSide(side lanSide) {
	if side == w.side {
		return
	}
	w.side = side
	switch {
	case side.Interface == "":
		w.log.Warn("LAN side not watched: while the LAN link is down this gateway stays ready and keeps its flows", "reason", side.Warning)
	case side.Derived:
		w.log.Info("watching the LAN interface that holds this gateway's address; lan.interface overrides it",
			"interface", side.Interface, "address", side.Addr, "source", "derived")
	default:
		w.log.Info("watching the LAN interface named by lan.interface", "interface", side.Interface, "source", "configured")
	}
}

// lanLinks is the LAN watch's view of the kernel: h is a netlink handle
// of the gateway's network namespace (the zero Handle works in the
// calling thread's, like the package functions). Its methods may be
// called from any goroutine.
type lanLinks struct{ h *netlink.Handle }

// side finds the interface to watch under cfg: lan.interface when cfg
// has a lan section, else the interface that now holds the gateway's
// address in the catalog (address, then address6), so that a gateway
// watches its LAN link without being told to. None holds it (the
// address is a VIP elsewhere, or not up yet): nothing is watched, as
// before the default existed, and Warning says why.
func (l lanLinks) side(cfg *config.Config) lanSide {
	if cfg.LAN != nil {
		return lanSide{Interface: cfg.LAN.Interface}
	}
	gw := cfg.LocalGateway()
	if gw == nil {
		return lanSide{Warning: fmt.Sprintf("gateway %q is not in the catalog: no address to find the LAN interface by; set lan.interface", cfg.Gateway)}
	}
	var tried []string
	for _, a := range []netip.Addr{gw.Address, gw.Address6} {
		if !a.IsValid() {
			continue
		}
		tried = append(tried, a.String())
		name, err := l.holder(a)
		switch {
		case err != nil:
			return lanSide{Warning: fmt.Sprintf("finding the interface that holds this gateway's address %s: %v; set lan.interface", a, err)}
		case name == cfg.Interface.Name:
			return lanSide{Warning: fmt.Sprintf("this gateway's address %s is on the tunnel interface %s; set lan.interface", a, name)}
		case name != "":
			return lanSide{Interface: name, Derived: true, Addr: a}
		}
	}
	if len(tried) == 0 {
		return lanSide{Warning: "this gateway has no address in the catalog; set lan.interface"}
	}
	return lanSide{Warning: fmt.Sprintf("no interface holds this gateway's address %s; set lan.interface to watch the LAN side", strings.Join(tried, " or "))}
}

// holder returns the name of the interface that holds address a, "" when
// none does.
func (l lanLinks) holder(a netip.Addr) (string, error) {
	family := netlink.FAMILY_V4
	if a.Is6() {
		family = netlink.FAMILY_V6
	}
	var addrs []netlink.Addr
	var err error
	for range 3 { // a dump interrupted by a change is retried
		if addrs, err = l.h.AddrList(nil, family); !errors.Is(err, netlink.ErrDumpInterrupted) {
			break
		}
	}
	if err != nil {
		return "", fmt.Errorf("listing addresses: %w", err)
	}
	for _, x := range addrs {
		if x.IPNet == nil {
			continue
		}
		if got, ok := netip.AddrFromSlice(x.IP); ok && got.Unmap() == a {
			link, err := l.h.LinkByIndex(x.LinkIndex)
			if err != nil {
				return "", fmt.Errorf("interface %d holding %s: %w", x.LinkIndex, a, err)
			}
			return link.Attrs().Name, nil
		}
	}
	return "", nil
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

// probe is the lanProbe of a running gateway: the LAN interface must
// exist and be up with a carrier, and, when lan.interface names it, the
// main table must route every nodeCIDR of the gateway's site through it.
// Its link going down takes its IPv4 connected routes with it. A derived
// interface is held to the link checks alone: an operator who did not
// name it did not say that every nodeCIDR is routed through it (a site's
// other subnets are often reached by the default route only, which the
// route check does not count), and a gateway must not stop delivering
// because of a default it never chose.
func (l lanLinks) probe(cfg *config.Config, side lanSide) string {
	if side.Interface == "" {
		return ""
	}
	name := side.Interface
	link, err := l.h.LinkByName(name)
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
	if site == nil || side.Derived {
		return ""
	}
	for _, pfx := range site.NodeCIDRs {
		if msg := l.routedVia(pfx, a.Index, name); msg != "" {
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
func (l lanLinks) routedVia(pfx netip.Prefix, idx int, name string) string {
	family := netlink.FAMILY_V4
	if pfx.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	routes, err := l.h.RouteListFiltered(family, &netlink.Route{Table: unix.RT_TABLE_MAIN, LinkIndex: idx},
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
