package nodeagent

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// Desired is everything one node needs: the model the agent applies.
// It is built whole by a source (FromConfig) and never changed after.
type Desired struct {
	Node string
	Site string
	// PodCIDR and PodCIDR6 are the node's own pod blocks (either may be
	// invalid, not both): the ranges of its CNI config and the sources
	// its SNAT rule applies to.
	PodCIDR, PodCIDR6 netip.Prefix
	// Routes are the node's static routes, sorted by destination.
	Routes []Route
	// ClusterCIDRs are every pod, node and service CIDR of every site:
	// pod traffic to them keeps its source address.
	ClusterCIDRs []netip.Prefix
}

// Route is one static route of the node.
type Route struct {
	Destination netip.Prefix
	// Vias are the next hops: one for a plain route, several for an
	// ECMP route. Sorted.
	Vias []netip.Addr
	// Why names what the route is for, for logs: "site b pod",
	// "node a2".
	Why string
}

// String formats r as `ip route` would show it.
func (r Route) String() string {
	var b strings.Builder
	b.WriteString(r.Destination.String())
	for _, v := range r.Vias {
		b.WriteString(" via ")
		b.WriteString(v.String())
	}
	return b.String()
}

// PodCIDRs returns the node's valid pod blocks, IPv4 first.
func (d *Desired) PodCIDRs() []netip.Prefix {
	var out []netip.Prefix
	for _, p := range []netip.Prefix{d.PodCIDR, d.PodCIDR6} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

// FromConfig builds the model of node from a catalog: the node is looked
// up by name in every site's nodes. Routes to other sites are those of
// noderoutes.Routes for the node's site, except on a node that is one of
// its site's gateways (same address), which routes them itself; routes to the other nodes of
// the site take their pod blocks via their addresses (a node without an
// IPv6 address gets no IPv6 route).
func FromConfig(c *config.Config, node string) (*Desired, error) {
	if c == nil {
		return nil, errors.New("no config")
	}
	if node == "" {
		return nil, errors.New("no node name")
	}
	var site *config.Site
	var self config.Node
	for i := range c.Sites {
		for _, n := range c.Sites[i].Nodes {
			if n.Name == node {
				site, self = &c.Sites[i], n
			}
		}
	}
	if site == nil {
		return nil, fmt.Errorf("%s: %w: no node %q in the nodes of any site (%s)", c.Path, ErrNodeNotFound, node, nodeNames(c))
	}
	d := &Desired{Node: node, Site: site.Name, PodCIDR: self.PodCIDR.Masked(), PodCIDR6: self.PodCIDR6.Masked()}
	if !d.PodCIDR.IsValid() && !d.PodCIDR6.IsValid() {
		return nil, fmt.Errorf("%s: node %q of site %q has no podCIDR", c.Path, node, site.Name)
	}
	plan, err := noderoutes.Routes(c, site.Name)
	if err != nil {
		return nil, err
	}
	if isGateway(site, self) {
		// An in-cluster gateway's node: the gateway routes the other
		// sites into its TUN (dev bh0). Routes of ours to the same
		// prefixes via the site's gateways (itself) would replace them.
		plan.Routes = nil
	}
	for _, r := range plan.Routes {
		vias := r.Vias
		if len(vias) == 0 {
			vias = []netip.Addr{r.Via}
		}
		d.Routes = append(d.Routes, Route{Destination: r.Destination, Vias: sortedAddrs(vias), Why: "site " + r.Site + " " + r.Kind})
	}
	for _, n := range site.Nodes {
		if n.Name == node {
			continue
		}
		if n.PodCIDR.IsValid() && n.Address.IsValid() {
			d.Routes = append(d.Routes, Route{Destination: n.PodCIDR.Masked(), Vias: []netip.Addr{n.Address}, Why: "node " + n.Name})
		}
		if n.PodCIDR6.IsValid() && n.Address6.IsValid() {
			d.Routes = append(d.Routes, Route{Destination: n.PodCIDR6.Masked(), Vias: []netip.Addr{n.Address6}, Why: "node " + n.Name})
		}
	}
	slices.SortFunc(d.Routes, func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) })
	for _, s := range c.Sites {
		d.ClusterCIDRs = append(d.ClusterCIDRs, s.NodeCIDRs...)
		d.ClusterCIDRs = append(d.ClusterCIDRs, s.PodCIDRs...)
	}
	d.ClusterCIDRs = append(d.ClusterCIDRs, c.Cluster.ServiceCIDRs...)
	for i, p := range d.ClusterCIDRs {
		d.ClusterCIDRs[i] = p.Masked()
	}
	slices.SortFunc(d.ClusterCIDRs, comparePrefix)
	d.ClusterCIDRs = slices.Compact(d.ClusterCIDRs)
	return d, nil
}

// isGateway reports whether node is also one of its site's gateways (an
// in-cluster gateway runs on a node: its Gateway's address is the node's).
func isGateway(site *config.Site, node config.Node) bool {
	for _, g := range site.Gateways {
		if (node.Address.IsValid() && g.Address == node.Address) || (node.Address6.IsValid() && g.Address6 == node.Address6) {
			return true
		}
	}
	return false
}

// ErrNodeNotFound: the catalog does not list the node.
var ErrNodeNotFound = errors.New("node not in the catalog")

// nodeNames names the catalog's nodes for an error: the first few, and
// how many there are (a site may have thousands).
func nodeNames(c *config.Config) string {
	const show = 8
	var names []string
	total := 0
	for _, s := range c.Sites {
		for _, n := range s.Nodes {
			if total++; total <= show {
				names = append(names, s.Name+"/"+n.Name)
			}
		}
	}
	switch {
	case total == 0:
		return "the catalog has no nodes"
	case total > show:
		return fmt.Sprintf("%d nodes: %s, ...", total, strings.Join(names, ", "))
	}
	return "the nodes are " + strings.Join(names, ", ")
}

func sortedAddrs(a []netip.Addr) []netip.Addr {
	out := slices.Clone(a)
	slices.SortFunc(out, func(x, y netip.Addr) int { return x.Compare(y) })
	return slices.Compact(out)
}

func comparePrefix(a, b netip.Prefix) int {
	if c := a.Addr().Compare(b.Addr()); c != 0 {
		return c
	}
	return a.Bits() - b.Bits()
}
