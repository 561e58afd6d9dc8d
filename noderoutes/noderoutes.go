// Package noderoutes renders the static routes the nodes of one site need
// to reach the other sites of the cluster through bridgehead: every other
// site's node and pod CIDRs, via the site's routerAddress (a virtual
// address in front of its gateways) or, without one, via every gateway of
// the site at once (an ECMP route), so all gateways carry traffic.
package noderoutes

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"sort"
	"strings"

	"github.com/bridgehead/bridgehead/config"
)

// Route kinds: which list of the destination site a route comes from.
const (
	KindNode = "node"
	KindPod  = "pod"
)

// Route is one route a node of the site needs.
type Route struct {
	Destination netip.Prefix
	// Via is the next hop; with several (Vias, an ECMP route), the
	// first of them.
	Via netip.Addr
	// Vias lists every next hop when there are several: the site has
	// no routerAddress of the family and several gateways with an
	// address of it. Nil for a single next hop.
	Vias []netip.Addr
	// Site is the site Destination belongs to; Kind is KindNode or KindPod.
	Site string
	Kind string
}

// Plan is the set of routes for the nodes of one site.
type Plan struct {
	Site string
	// Via is the site's next hop: routerAddress if set, else the address
	// of its first gateway. Destinations of the other address family use
	// the first next hop of their family (see Routes).
	Via    netip.Addr
	Routes []Route
}

// Routes computes the plan for the nodes of site (c.Site when empty).
//
// A route takes the site's routerAddress when it is of the destination's
// address family, else the addresses of every gateway with one of that
// family: one is a plain route, several an ECMP route (Route.Vias).
// When the site has no next hop of a destination's family (say, IPv6 pod
// CIDRs elsewhere but only IPv4 addresses here), nothing is returned and
// the error names every such destination.
func Routes(c *config.Config, site string) (*Plan, error) {
	if c == nil {
		return nil, errors.New("no config")
	}
	if site == "" {
		site = c.Site
	}
	local := c.SiteByName(site)
	if local == nil {
		var names []string
		for _, s := range c.Sites {
			names = append(names, s.Name)
		}
		return nil, fmt.Errorf("%s: no site %q; the sites are %s", c.Path, site, strings.Join(names, ", "))
	}
	var vias4, vias6 []netip.Addr
	if local.RouterAddress.Is4() {
		vias4 = []netip.Addr{local.RouterAddress}
	}
	if a := local.RouterAddress6; a.Is6() {
		vias6 = []netip.Addr{a}
	} else if a := local.RouterAddress; a.Is6() {
		vias6 = []netip.Addr{a}
	}
	routerAddr4, routerAddr6 := len(vias4) > 0, len(vias6) > 0
	for _, a := range gatewayAddrs(local) {
		switch {
		case !a.IsValid():
		case a.Is4() && !routerAddr4 && !slices.Contains(vias4, a):
			vias4 = append(vias4, a)
		case a.Is6() && !routerAddr6 && !slices.Contains(vias6, a):
			vias6 = append(vias6, a)
		}
	}
	plan := &Plan{Site: local.Name, Via: local.RouterAddress}
	if !plan.Via.IsValid() && len(local.Gateways) > 0 {
		plan.Via = local.Gateways[0].Address
	}
	var missing []string
	for i, s := range c.Sites {
		if s.Name == local.Name {
			continue
		}
		for _, list := range []struct {
			kind, field string
			cidrs       []netip.Prefix
		}{{KindNode, "nodeCIDRs", s.NodeCIDRs}, {KindPod, "podCIDRs", s.PodCIDRs}} {
			for j, p := range list.cidrs {
				if !p.IsValid() {
					continue
				}
				vias := vias4
				if p.Addr().Is6() {
					vias = vias6
				}
				if len(vias) == 0 {
					field := fmt.Sprintf("sites[%d].%s[%d]", i, list.field, j)
					fam := "IPv4"
					if p.Addr().Is6() {
						fam = "IPv6"
					}
					missing = append(missing, fmt.Sprintf("%s %s (%s:%d: %s)", fam, p, c.Path, c.Line(field), field))
					continue
				}
				r := Route{Destination: p.Masked(), Via: vias[0], Site: s.Name, Kind: list.kind}
				if len(vias) > 1 {
					r.Vias = vias
				}
				plan.Routes = append(plan.Routes, r)
			}
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("site %q has no next hop of the right address family (a routerAddress/routerAddress6 or gateway address/address6) for:\n\t%s",
			local.Name, strings.Join(missing, "\n\t"))
	}
	return plan, nil
}

func gatewayAddrs(s *config.Site) []netip.Addr {
	out := make([]netip.Addr, 0, len(s.Gateways))
	for _, g := range s.Gateways {
		out = append(out, g.Address, g.Address6)
	}
	return out
}

// Option adjusts Render.
type Option func(*options)

type options struct {
	iface string
}

// DefaultInterface is the interface name the netplan format uses unless
// WithInterface says otherwise.
const DefaultInterface = "eth0"

// WithInterface sets the interface the netplan routes are attached to.
func WithInterface(name string) Option {
	return func(o *options) { o.iface = name }
}

// renderers maps format names to their functions.
func renderers() map[string]func(*bytes.Buffer, *config.Config, *Plan, options) error {
	return map[string]func(*bytes.Buffer, *config.Config, *Plan, options) error{
		"ip":       renderIP,
		"networkd": renderNetworkd,
		"netplan":  renderNetplan,
		"azure":    renderAzure,
		"json":     renderJSON,
	}
}

// Formats lists the formats Render accepts.
func Formats() []string {
	var out []string
	for f := range renderers() {
		out = append(out, f)
	}
	sort.Strings(out)
	return out
}

// Render writes the routes the nodes of site need, in format:
//
//   - ip: a shell script of "ip route replace" commands;
//   - networkd: a systemd-networkd .network drop-in, one [Route] each;
//   - netplan: a netplan YAML snippet (interface from WithInterface);
//   - azure: a shell script of "az network route-table route create"
//     commands for $RESOURCE_GROUP and $ROUTE_TABLE, then the pod range of
//     each node of the site via the node (as kubenet's route controller);
//   - json: the Plan as JSON.
//
// Nothing is written when an error is returned.
func Render(w io.Writer, c *config.Config, site, format string, opts ...Option) error {
	render, ok := renderers()[format]
	if !ok {
		return fmt.Errorf("unknown format %q (want one of %s)", format, strings.Join(Formats(), ", "))
	}
	o := options{iface: DefaultInterface}
	for _, opt := range opts {
		if opt != nil {
			opt(&o)
		}
	}
	plan, err := Routes(c, site)
	if err != nil {
		return err
	}
	var b bytes.Buffer
	if err := render(&b, c, plan, o); err != nil {
		return err
	}
	_, err = w.Write(b.Bytes())
	return err
}
