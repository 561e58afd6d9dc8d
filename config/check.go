package config

import (
	"bytes"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/netip"
	"os"
)

// CheckOptions adjusts Check.
type CheckOptions struct {
	// SkipPrivateKey turns off the private key file checks, for checking
	// a config away from the gateway that holds the key (and in tests).
	SkipPrivateKey bool
	// ReadFile and Stat replace os.ReadFile and os.Stat for the private
	// key file when set.
	ReadFile func(name string) ([]byte, error)
	Stat     func(name string) (fs.FileInfo, error)
}

// Check validates the address plan of a Config returned by Load or Parse
// (which already made the basic checks). It returns every problem, which
// should stop the daemon, and every warning, each with file, line and
// field, sorted by line. Both are nil when there is nothing to report.
//
// The rules, one function each:
//   - checkHostBits: no prefix has host bits set;
//   - checkOverlaps: node and pod CIDRs of all sites and the service CIDRs
//     are pairwise disjoint, within and across sites. This also ensures no
//     site's own CIDRs are routed to another site;
//   - checkReserved: none of them overlaps a range AKS reserves;
//   - checkDNSServiceIP: cluster.dnsServiceIP lies in a service CIDR;
//   - checkSiteGateways: every site has a gateway (else its CIDRs would be
//     routed nowhere); a site without node or pod CIDRs is a warning;
//   - checkGatewayAddresses: each gateway address is in its site's node
//     CIDRs;
//   - checkNodes: node names unique per site, addresses in the node CIDRs,
//     pod CIDRs in the site's pod CIDRs and disjoint from each other;
//   - checkRouterAddress: routerAddress is in its site's node CIDRs;
//   - checkPrivateKey: privateKeyFile is set, readable, holds a valid key
//     whose public key is this gateway's publicKey; a warning when group
//     or others have access to it;
//   - checkSelfRoute: none of the local gateway's own addresses (its
//     address, listen address, the site's routerAddress) lies in a CIDR of
//     another site, which the gateway routes into the tunnel;
//   - checkEndpoints (warnings): a remote gateway endpoint inside a CIDR
//     routed into the tunnel would loop tunnel packets into the tunnel; an
//     endpoint of the other address family than listen is unreachable.
func Check(c *Config, opts CheckOptions) (problems ErrorList, warnings ErrorList) {
	if c == nil {
		return ErrorList{{File: "<config>", Msg: "no config"}}, nil
	}
	r := &reporter{file: c.Path, lines: c.lines}
	checkHostBits(c, r)
	checkOverlaps(c, r)
	checkReserved(c, r)
	checkDNSServiceIP(c, r)
	checkSiteGateways(c, r)
	checkGatewayAddresses(c, r)
	checkNodes(c, r)
	checkRouterAddress(c, r)
	if !opts.SkipPrivateKey {
		checkPrivateKey(c, r, opts)
	}
	checkSelfRoute(c, r)
	checkEndpoints(c, r)
	checkRelayPlan(c, r, opts)
	if len(r.errs) > 0 {
		problems = r.errs.sorted()
	}
	if len(r.warns) > 0 {
		warnings = r.warns.sorted()
	}
	return problems, warnings
}

// cidr is a prefix of the address plan with where it came from.
type cidr struct {
	path string
	p    netip.Prefix
	site int // index in Sites, -1 for cluster.serviceCIDRs
}

// planCIDRs lists the node and pod CIDRs of every site and the service
// CIDRs, skipping entries that failed to parse.
func planCIDRs(c *Config) []cidr {
	var out []cidr
	add := func(path string, site int, ps []netip.Prefix) {
		for i, p := range ps {
			if p.IsValid() {
				out = append(out, cidr{indexPath(path, i), p, site})
			}
		}
	}
	for i, s := range c.Sites {
		sp := indexPath("sites", i)
		add(joinPath(sp, "nodeCIDRs"), i, s.NodeCIDRs)
		add(joinPath(sp, "podCIDRs"), i, s.PodCIDRs)
	}
	add("cluster.serviceCIDRs", -1, c.Cluster.ServiceCIDRs)
	return out
}

// checkHostBits: every prefix is in canonical form.
func checkHostBits(c *Config, r *reporter) {
	check := func(path string, p netip.Prefix) {
		if p.IsValid() && p.Masked() != p {
			r.errorf(path, "%s has host bits set; did you mean %s?", p, p.Masked())
		}
	}
	for _, x := range planCIDRs(c) {
		check(x.path, x.p)
	}
	for i, s := range c.Sites {
		for j, n := range s.Nodes {
			check(nodePath(i, j, "podCIDR"), n.PodCIDR)
		}
	}
}

// checkOverlaps: no two CIDRs of the address plan overlap. The problem is
// reported on the later one and names both.
func checkOverlaps(c *Config, r *reporter) {
	all := planCIDRs(c)
	for j, b := range all {
		for _, a := range all[:j] {
			if a.p.Masked().Overlaps(b.p.Masked()) {
				r.errorf(b.path, "%s overlaps %s %s (line %d)", b.p, a.path, a.p, r.line(a.path))
			}
		}
	}
}

// reservedRanges are the ranges AKS does not allow in node, pod and
// service CIDRs.
func reservedRanges() []netip.Prefix {
	return []netip.Prefix{
		netip.MustParsePrefix("169.254.0.0/16"),
		netip.MustParsePrefix("172.30.0.0/16"),
		netip.MustParsePrefix("172.31.0.0/16"),
		netip.MustParsePrefix("192.0.2.0/24"),
	}
}

// checkReserved: no CIDR overlaps a range AKS reserves.
func checkReserved(c *Config, r *reporter) {
	for _, x := range planCIDRs(c) {
		for _, res := range reservedRanges() {
			if x.p.Masked().Overlaps(res) {
				r.errorf(x.path, "%s overlaps %s, which AKS reserves", x.p, res)
			}
		}
	}
}

// checkDNSServiceIP: the cluster DNS address is in a service CIDR.
func checkDNSServiceIP(c *Config, r *reporter) {
	ip := c.Cluster.DNSServiceIP
	if !ip.IsValid() {
		return
	}
	if len(c.Cluster.ServiceCIDRs) == 0 {
		r.errorf("cluster.dnsServiceIP", "is set but cluster.serviceCIDRs is empty")
		return
	}
	if !inAny(c.Cluster.ServiceCIDRs, ip) {
		r.errorf("cluster.dnsServiceIP", "%s is not inside cluster.serviceCIDRs %v", ip, c.Cluster.ServiceCIDRs)
	}
}

// checkSiteGateways: a site without gateways cannot be reached; a site
// without CIDRs has nothing to route.
func checkSiteGateways(c *Config, r *reporter) {
	for i, s := range c.Sites {
		sp := indexPath("sites", i)
		if len(s.Gateways) == 0 {
			r.errorf(joinPath(sp, "gateways"), "site %q has no gateways", s.Name)
		}
		if len(s.NodeCIDRs) == 0 && len(s.PodCIDRs) == 0 {
			r.warnf(sp, "site %q has no nodeCIDRs and no podCIDRs: nothing is routed to it", s.Name)
		}
	}
}

// checkGatewayAddresses: each gateway's LAN address is in its site's node
// CIDRs.
func checkGatewayAddresses(c *Config, r *reporter) {
	for i, s := range c.Sites {
		for j, g := range s.Gateways {
			path := gatewayPath(i, j, "address")
			switch {
			case !g.Address.IsValid():
				r.errorf(path, "is required: the gateway's address in its site's node network")
			case !inAny(s.NodeCIDRs, g.Address):
				r.errorf(path, "%s is not inside the nodeCIDRs of site %q %v", g.Address, s.Name, s.NodeCIDRs)
			}
			checkAddr6(r, gatewayPath(i, j, "address6"), g.Address6, s)
		}
	}
}

func nodePath(site, node int, name string) string {
	return joinPath(indexPath(joinPath(indexPath("sites", site), "nodes"), node), name)
}

// checkNodes: the nodes of each site have unique names, addresses in the
// node CIDRs and disjoint pod CIDRs inside the site's pod CIDRs.
func checkNodes(c *Config, r *reporter) {
	for i, s := range c.Sites {
		names := map[string]string{}
		for j, n := range s.Nodes {
			namePath := nodePath(i, j, "name")
			if n.Name == "" {
				r.errorf(namePath, "is required")
			} else if first, dup := names[n.Name]; dup {
				r.errorf(namePath, "duplicate node name %q in site %q (also %s, line %d)", n.Name, s.Name, first, r.line(first))
			} else {
				names[n.Name] = namePath
			}

			addrPath := nodePath(i, j, "address")
			if !n.Address.IsValid() {
				r.errorf(addrPath, "is required")
			} else if !inAny(s.NodeCIDRs, n.Address) {
				r.errorf(addrPath, "%s is not inside the nodeCIDRs of site %q %v", n.Address, s.Name, s.NodeCIDRs)
			}

			checkAddr6(r, nodePath(i, j, "address6"), n.Address6, s)
			if n.PodCIDR6.IsValid() {
				p6 := nodePath(i, j, "podCIDR6")
				switch {
				case !n.PodCIDR6.Addr().Is6():
					r.errorf(p6, "%s is not an IPv6 prefix", n.PodCIDR6)
				case !n.Address6.IsValid():
					r.errorf(p6, "needs address6: the gateway routes %s via the node's IPv6 address", n.PodCIDR6)
				case !withinAny(s.PodCIDRs, n.PodCIDR6):
					r.errorf(p6, "%s is not inside the podCIDRs of site %q %v", n.PodCIDR6, s.Name, s.PodCIDRs)
				}
				for k, m := range s.Nodes[:j] {
					if m.PodCIDR6.IsValid() && m.PodCIDR6.Masked().Overlaps(n.PodCIDR6.Masked()) {
						other := nodePath(i, k, "podCIDR6")
						r.errorf(p6, "%s overlaps %s %s (line %d)", n.PodCIDR6, other, m.PodCIDR6, r.line(other))
					}
				}
			}

			podPath := nodePath(i, j, "podCIDR")
			if !n.PodCIDR.IsValid() {
				r.errorf(podPath, "is required")
				continue
			}
			if !withinAny(s.PodCIDRs, n.PodCIDR) {
				r.errorf(podPath, "%s is not inside the podCIDRs of site %q %v", n.PodCIDR, s.Name, s.PodCIDRs)
			}
			for k, m := range s.Nodes[:j] {
				if m.PodCIDR.IsValid() && m.PodCIDR.Masked().Overlaps(n.PodCIDR.Masked()) {
					other := nodePath(i, k, "podCIDR")
					r.errorf(podPath, "%s overlaps %s %s (line %d)", n.PodCIDR, other, m.PodCIDR, r.line(other))
				}
			}
		}
	}
}

// checkAddr6: an optional IPv6 LAN address is IPv6 and in the site's
// node CIDRs.
func checkAddr6(r *reporter, path string, a netip.Addr, s Site) {
	switch {
	case !a.IsValid():
	case !a.Is6() || a.Is4In6():
		r.errorf(path, "%s is not an IPv6 address", a)
	case !inAny(s.NodeCIDRs, a):
		r.errorf(path, "%s is not inside the nodeCIDRs of site %q %v", a, s.Name, s.NodeCIDRs)
	}
}

// checkRouterAddress: a site's routerAddress (and routerAddress6) is in
// its node CIDRs.
func checkRouterAddress(c *Config, r *reporter) {
	for i, s := range c.Sites {
		checkAddr6(r, joinPath(indexPath("sites", i), "routerAddress6"), s.RouterAddress6, s)
		if s.RouterAddress.IsValid() && !inAny(s.NodeCIDRs, s.RouterAddress) {
			r.errorf(joinPath(indexPath("sites", i), "routerAddress"), "%s is not inside the nodeCIDRs of site %q %v", s.RouterAddress, s.Name, s.NodeCIDRs)
		}
	}
}

// checkPrivateKey: the private key file exists, parses and belongs to the
// local gateway's publicKey. Group or other access is a warning.
func checkPrivateKey(c *Config, r *reporter, opts CheckOptions) {
	const field = "privateKeyFile"
	path := c.PrivateKeyPath()
	if path == "" {
		r.errorf(field, "is required: the file holding this gateway's private key")
		return
	}
	stat, read := os.Stat, os.ReadFile
	if opts.Stat != nil {
		stat = opts.Stat
	}
	if opts.ReadFile != nil {
		read = opts.ReadFile
	}
	info, err := stat(path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			r.errorf(field, "%s does not exist", path)
		} else {
			r.errorf(field, "%v", err)
		}
		return
	}
	if !info.Mode().IsRegular() {
		r.errorf(field, "%s is not a regular file", path)
		return
	}
	if perm := info.Mode().Perm(); perm&0o077 != 0 {
		r.warnf(field, "%s has mode %04o: group and others can access the private key; chmod 600 it", path, perm)
	}
	data, err := read(path)
	if err != nil {
		r.errorf(field, "%v", err)
		return
	}
	pub, err := parsePrivateKey(data)
	if err != nil {
		r.errorf(field, "the key in %s %v", path, err)
		return
	}
	g := c.LocalGateway()
	if g == nil {
		return // reported by Parse
	}
	listed, err := parsePublicKey(g.PublicKey)
	if err != nil {
		return // reported by Parse
	}
	if !bytes.Equal(pub, listed) {
		si, gi := localIndexes(c)
		pkPath := gatewayPath(si, gi, "publicKey")
		r.errorf(field, "the key in %s has public key %s, but %s (line %d) is %s",
			path, base64.StdEncoding.EncodeToString(pub), pkPath, r.line(pkPath), g.PublicKey)
	}
}

// localIndexes returns the indexes of the local site and gateway, -1 when
// not found.
func localIndexes(c *Config) (site, gw int) {
	site, gw = -1, -1
	for i := range c.Sites {
		if c.Sites[i].Name == c.Site {
			site = i
			for j := range c.Sites[i].Gateways {
				if c.Sites[i].Gateways[j].Name == c.Gateway {
					return i, j
				}
			}
			return i, -1
		}
	}
	return site, gw
}

// tunnelCIDRs are the CIDRs the gateway of site local routes into the
// tunnel: the node and pod CIDRs of every other site.
func tunnelCIDRs(c *Config, local int) []cidr {
	var out []cidr
	for _, x := range planCIDRs(c) {
		if x.site >= 0 && x.site != local {
			out = append(out, x)
		}
	}
	return out
}

// checkSelfRoute: the local gateway's own addresses are not inside a CIDR
// it routes into the tunnel, or it would send its own traffic to a peer.
func checkSelfRoute(c *Config, r *reporter) {
	si, gi := localIndexes(c)
	if si < 0 {
		return
	}
	remote := tunnelCIDRs(c, si)
	check := func(path string, a netip.Addr) {
		if !a.IsValid() {
			return
		}
		for _, x := range remote {
			if x.p.Masked().Contains(a) {
				r.errorf(path, "%s is inside %s %s (line %d) of another site: this gateway would route its own traffic into the tunnel", a, x.path, x.p, r.line(x.path))
			}
		}
	}
	if gi >= 0 {
		check(gatewayPath(si, gi, "address"), c.Sites[si].Gateways[gi].Address)
	}
	if a := c.ListenAddr.Addr(); !a.IsUnspecified() {
		check("listen", a)
	}
	check(joinPath(indexPath("sites", si), "routerAddress"), c.Sites[si].RouterAddress)
}

// checkEndpoints warns about remote gateway endpoints the local gateway
// cannot use as they are.
func checkEndpoints(c *Config, r *reporter) {
	si, _ := localIndexes(c)
	if si < 0 {
		return
	}
	remote := tunnelCIDRs(c, si)
	listen := c.ListenAddr.Addr()
	dualStack := listen.Is6() && listen.IsUnspecified()
	for i, s := range c.Sites {
		if i == si {
			continue
		}
		for j, g := range s.Gateways {
			a := g.EndpointAddr.Addr()
			if !a.IsValid() {
				continue
			}
			path := gatewayPath(i, j, "endpoint")
			for _, x := range remote {
				if x.p.Masked().Contains(a) {
					r.warnf(path, "%s is inside %s %s (line %d), which is routed into the tunnel: tunnel packets to it would loop unless the host routes them outside the tunnel", a, x.path, x.p, r.line(x.path))
				}
			}
			if listen.IsValid() && !dualStack && a.Is4() != listen.Is4() {
				r.warnf(path, "%s cannot be reached from listen address %s (other address family)", a, c.ListenAddr)
			}
		}
	}
}

// inAny reports whether a is inside one of ps.
func inAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.IsValid() && p.Masked().Contains(a) {
			return true
		}
	}
	return false
}

// withinAny reports whether q lies entirely inside one of ps.
func withinAny(ps []netip.Prefix, q netip.Prefix) bool {
	for _, p := range ps {
		if p.IsValid() && p.Bits() <= q.Bits() && p.Masked().Contains(q.Addr()) {
			return true
		}
	}
	return false
}

// CheckFile loads path and reports every problem in it at once: those
// found while decoding (syntax, unknown fields, values that do not parse)
// together with the address-plan rules of Check, run on whatever decoded.
// A Check problem on a field that already failed to decode is left out, so
// one mistake is reported once. It returns the config only when there are
// no problems.
func CheckFile(path string, opts CheckOptions) (*Config, ErrorList, ErrorList, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	c, decodeErrs := defaultLoader().parseAll(path, data)
	if c == nil {
		return nil, decodeErrs, nil, nil
	}
	problems, warnings := Check(c, opts)
	bad := map[string]bool{}
	for _, e := range decodeErrs {
		bad[e.Field] = true
	}
	all := append(ErrorList(nil), decodeErrs...)
	for _, p := range problems {
		if !bad[p.Field] {
			all = append(all, p)
		}
	}
	if len(all) > 0 {
		return nil, all.sorted(), warnings, nil
	}
	return c, nil, warnings, nil
}
