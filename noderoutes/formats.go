package noderoutes

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/bridgehead/bridgehead/config"
)

// header writes the comment lines every text format starts with.
func header(b *bytes.Buffer, c *config.Config, p *Plan, how string) {
	fmt.Fprintf(b, "# Routes for the nodes of site %q to the other sites of cluster %q,\n", p.Site, c.Cluster.Name)
	fmt.Fprintf(b, "# through bridgehead. Generated from %s (config %s); do not edit.\n", filepath.Base(c.Path), c.Hash())
	fmt.Fprintf(b, "# %s\n", how)
}

// siteComment returns the comment line to write before route i: the
// destination site, at every change of site.
func siteComment(p *Plan, i int) string {
	if i > 0 && p.Routes[i-1].Site == p.Routes[i].Site {
		return ""
	}
	return fmt.Sprintf("# site %q\n", p.Routes[i].Site)
}

func renderIP(b *bytes.Buffer, c *config.Config, p *Plan, _ options) error {
	header(b, c, p, "Run as root on every node of the site.")
	for i, r := range p.Routes {
		b.WriteString(siteComment(p, i))
		cmd := "ip"
		if r.Destination.Addr().Is6() {
			cmd = "ip -6"
		}
		if len(r.Vias) == 0 {
			fmt.Fprintf(b, "%s route replace %s via %s\n", cmd, r.Destination, r.Via)
			continue
		}
		fmt.Fprintf(b, "%s route replace %s", cmd, r.Destination)
		for _, v := range r.Vias {
			fmt.Fprintf(b, " nexthop via %s", v)
		}
		b.WriteString("\n")
	}
	return nil
}

func renderNetworkd(b *bytes.Buffer, c *config.Config, p *Plan, _ options) error {
	header(b, c, p, "Install as /etc/systemd/network/<node's .network file>.d/bridgehead-routes.conf")
	for _, r := range p.Routes {
		fmt.Fprintf(b, "\n# site %q, %s CIDR\n[Route]\nDestination=%s\n", r.Site, r.Kind, r.Destination)
		if len(r.Vias) == 0 {
			fmt.Fprintf(b, "Gateway=%s\n", r.Via)
			continue
		}
		for _, v := range r.Vias {
			fmt.Fprintf(b, "MultiPathRoute=%s\n", v)
		}
	}
	return nil
}

// netplanIDOK reports whether an interface id can be written as a plain
// YAML key.
func netplanIDOK(s string) bool {
	if s == "" || len(s) > 15 {
		return false
	}
	for _, ch := range s {
		ok := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9' || ch == '-' || ch == '_' || ch == '.'
		if !ok {
			return false
		}
	}
	return true
}

func renderNetplan(b *bytes.Buffer, c *config.Config, p *Plan, o options) error {
	if !netplanIDOK(o.iface) {
		return fmt.Errorf("netplan: %q is not an interface name (letters, digits, '-', '_', '.'; at most 15)", o.iface)
	}
	if err := singleNextHop(p, "netplan", "use --format networkd (MultiPathRoute=)"); err != nil {
		return err
	}
	header(b, c, p, "Merge into /etc/netplan/ (e.g. 90-bridgehead-routes.yaml) and run netplan apply.")
	fmt.Fprintf(b, "network:\n  version: 2\n  ethernets:\n    %s:\n", o.iface)
	if len(p.Routes) == 0 {
		b.WriteString("      routes: []\n")
		return nil
	}
	b.WriteString("      routes:\n")
	for _, r := range p.Routes {
		fmt.Fprintf(b, "        - to: %s\n          via: %s\n", r.Destination, r.Via)
	}
	return nil
}

// Azure route names: 1-80 characters of letters, digits, '_', '.' and
// '-', starting with a letter or digit and ending with a letter, digit or
// '_'.
const maxAzureName = 80

// azureName derives a route name from the destination site and CIDR, e.g.
// "bh-b-pod-10.245.0.0_16" or "bh-b-pod-fd00-b-1--_56".
func azureName(r Route) string {
	var sb strings.Builder
	sb.WriteString("bh-")
	for _, ch := range r.Site {
		switch {
		case ch >= 'a' && ch <= 'z', ch >= 'A' && ch <= 'Z', ch >= '0' && ch <= '9', ch == '_', ch == '.', ch == '-':
			sb.WriteRune(ch)
		default:
			sb.WriteByte('-')
		}
	}
	sb.WriteString("-" + r.Kind + "-")
	sb.WriteString(strings.NewReplacer(":", "-", "/", "_").Replace(r.Destination.String()))
	name := sb.String()
	if len(name) > maxAzureName {
		sum := sha256.Sum256([]byte(name))
		name = name[:maxAzureName-9] + "-" + hex.EncodeToString(sum[:4])
	}
	return name
}

// AzureRoute is one entry of a site's Azure route table: its name (see
// azureName), destination and next hop (type VirtualAppliance).
type AzureRoute struct {
	Name        string
	Destination netip.Prefix
	Via         netip.Addr
	// Node is the node whose pod range this is, "" for a remote site's
	// CIDR.
	Node string
}

// AzureRoutes is the route table of site's node subnet: the other
// sites' CIDRs via the site's next hop, then each of the site's nodes'
// pod ranges via the node (the entries kubenet's route controller keeps,
// for a VNet that does not carry pod addresses between nodes by itself).
// `routes --format azure` prints them; the controller's route-table sync
// (controller/azureroutes) keeps them.
func AzureRoutes(c *config.Config, site string) ([]AzureRoute, error) {
	p, err := Routes(c, site)
	if err != nil {
		return nil, err
	}
	if err := singleNextHop(p, "azure", "put an internal load balancer with an HA-ports rule in front of the gateways and set the site's routerAddress to its frontend IP"); err != nil {
		return nil, err
	}
	var out []AzureRoute
	seen := map[string]Route{}
	add := func(r Route, node string) error {
		name := azureName(r)
		if prev, dup := seen[strings.ToLower(name)]; dup {
			return fmt.Errorf("azure: routes to %s and %s would both be named %q", prev.Destination, r.Destination, name)
		}
		seen[strings.ToLower(name)] = r
		out = append(out, AzureRoute{Name: name, Destination: r.Destination, Via: r.Via, Node: node})
		return nil
	}
	for _, r := range p.Routes {
		if err := add(r, ""); err != nil {
			return nil, err
		}
	}
	for _, n := range siteNodeRoutes(c, p.Site) {
		if err := add(n.Route, n.node); err != nil {
			return nil, err
		}
	}
	return out, nil
}

func renderAzure(b *bytes.Buffer, c *config.Config, p *Plan, _ options) error {
	routes, err := AzureRoutes(c, p.Site)
	if err != nil {
		return err
	}
	b.WriteString("#!/bin/sh\n")
	header(b, c, p, "Adds them to the route table of the site's node subnet; set RESOURCE_GROUP and ROUTE_TABLE first.")
	b.WriteString("set -eu\n: \"${RESOURCE_GROUP:?set RESOURCE_GROUP}\"\n: \"${ROUTE_TABLE:?set ROUTE_TABLE}\"\n")
	for i, r := range routes {
		if i < len(p.Routes) {
			b.WriteString(siteComment(p, i))
		} else if i == len(p.Routes) {
			fmt.Fprintf(b, "# site %q's own nodes: each node's pod range via the node (the node NICs need IP forwarding)\n", p.Site)
		}
		azRoute(b, r.Name, r.Destination, r.Via)
	}
	return nil
}

func azRoute(b *bytes.Buffer, name string, dst netip.Prefix, via netip.Addr) {
	fmt.Fprintf(b, "az network route-table route create --resource-group \"${RESOURCE_GROUP}\" --route-table-name \"${ROUTE_TABLE}\""+
		" --name %s --address-prefix %s --next-hop-type VirtualAppliance --next-hop-ip-address %s\n", name, dst, via)
}

// nodeRoute is a route to a node's pod range, and the node.
type nodeRoute struct {
	Route
	node string
}

// siteNodeRoutes lists the pod ranges of site's nodes via their
// addresses (IPv6 ranges via address6), in catalog order.
func siteNodeRoutes(c *config.Config, site string) []nodeRoute {
	s := c.SiteByName(site)
	if s == nil {
		return nil
	}
	var out []nodeRoute
	for _, n := range s.Nodes {
		if n.PodCIDR.IsValid() && n.Address.IsValid() {
			out = append(out, nodeRoute{Route{Destination: n.PodCIDR.Masked(), Via: n.Address, Site: s.Name, Kind: KindPod}, n.Name})
		}
		if n.PodCIDR6.IsValid() && n.Address6.IsValid() {
			out = append(out, nodeRoute{Route{Destination: n.PodCIDR6.Masked(), Via: n.Address6, Site: s.Name, Kind: KindPod}, n.Name})
		}
	}
	return out
}

// singleNextHop refuses a plan with ECMP routes for a format that cannot
// express them.
func singleNextHop(p *Plan, format, instead string) error {
	for _, r := range p.Routes {
		if len(r.Vias) > 0 {
			return fmt.Errorf("%s routes take one next hop, but site %q has %d gateways and no routerAddress for %s: %s",
				format, p.Site, len(r.Vias), r.Destination, instead)
		}
	}
	return nil
}

type jsonRoute struct {
	Destination string   `json:"destination"`
	Via         string   `json:"via"`
	Vias        []string `json:"vias,omitempty"`
	Site        string   `json:"site"`
	Kind        string   `json:"kind"`
}

type jsonPlan struct {
	Site   string      `json:"site"`
	Via    string      `json:"via"`
	Routes []jsonRoute `json:"routes"`
}

func renderJSON(b *bytes.Buffer, _ *config.Config, p *Plan, _ options) error {
	out := jsonPlan{Site: p.Site, Routes: []jsonRoute{}}
	if p.Via.IsValid() {
		out.Via = p.Via.String()
	}
	for _, r := range p.Routes {
		jr := jsonRoute{Destination: r.Destination.String(), Via: r.Via.String(), Site: r.Site, Kind: r.Kind}
		for _, v := range r.Vias {
			jr.Vias = append(jr.Vias, v.String())
		}
		out.Routes = append(out.Routes, jr)
	}
	enc := json.NewEncoder(b)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}
