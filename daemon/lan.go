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
	p := w.probe(w.cfg())
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
// must exist and be up with a carrier, and the kernel must route every
// nodeCIDR of the gateway's site through it. Its link going down takes
// its connected routes with it, so a network address then routes through
// another interface (a default route) or nowhere.
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

// routedVia returns "" when the kernel routes pfx's network address
// through the link with index idx, else what it does instead.
func routedVia(pfx netip.Prefix, idx int, name string) string {
	routes, err := netlink.RouteGet(pfx.Masked().Addr().AsSlice())
	if err != nil || len(routes) == 0 {
		return fmt.Sprintf("no route to nodeCIDR %s", pfx)
	}
	if routes[0].LinkIndex == idx {
		return ""
	}
	via := fmt.Sprintf("interface %d", routes[0].LinkIndex)
	if l, err := netlink.LinkByIndex(routes[0].LinkIndex); err == nil {
		via = l.Attrs().Name
	}
	return fmt.Sprintf("nodeCIDR %s is routed through %s, not the LAN interface %s", pfx, via, name)
}
