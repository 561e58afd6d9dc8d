package config

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"io/fs"
	"net/netip"
	"regexp"
	"slices"
	"strings"
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
	// Overrides are applied to the file by CheckData and
	// CheckWithCatalog, as LoadWith applies them.
	Overrides Overrides
}

// Check validates the address plan of a Config returned by Load or Parse
// (which already made the basic checks). It returns every problem, which
// should stop the daemon, and every warning, each with file, line and
// field, sorted by line. Both are nil when there is nothing to report.
//
// The rules, one function each:
//   - checkHostBits: no prefix has host bits set;
//   - checkMapped: no prefix is IPv4-mapped IPv6 (::ffff:a.b.c.d/n), which
//     the data path would treat as the IPv4 range and so escape the
//     overlap checks;
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
//     whose public key is this gateway's publicKey, and only its owner
//     has access to it (as ssh, it refuses a key others could read);
//   - checkSelfRoute: none of the local gateway's own addresses (its
//     address, listen address, the site's routerAddress) lies in a CIDR of
//     another site, which the gateway routes into the tunnel;
//   - checkEndpoints (warnings): a remote gateway endpoint inside a CIDR
//     routed into the tunnel would loop tunnel packets into the tunnel; an
//     endpoint of the other address family than listen is unreachable.
//   - checkHubs: sites behind NAT (gateways without endpoint) have a
//     hub when they need one; `via` names other sites with a gateway
//     endpoint, without cycles; gateways' key IDs are distinct; an
//     interface.mtu that leaves no room for the relay header on a
//     gateway that can be relayed is a warning (hubs.go);
//   - checkNextHopFamilies (warnings): a site whose nodes need routes to
//     another site's CIDRs of an address family in which it has no next
//     hop, which `bridgehead routes` refuses for that site.
//   - checkSitePolicy: allowedSources names sites, each once (a site
//     naming itself is a warning; sitepolicy.go).
//
// Every rule is O(n log n) in the number of prefixes (see prefixset.go).
func Check(c *Config, opts CheckOptions) (problems ErrorList, warnings ErrorList) {
	problems, warnings, _ = check(c, opts)
	return problems, warnings
}

// check is Check, also returning the count of primitive steps it took.
func check(c *Config, opts CheckOptions) (problems, warnings ErrorList, ops int) {
	if c == nil {
		return ErrorList{{File: "<config>", Msg: "no config"}}, nil, 0
	}
	r := &reporter{file: c.Path, catalog: c.CatalogPath(), catalogRelay: c.relayFromCatalog, lines: c.lines}
	plan := planCIDRs(c)
	sites := newSiteIndexes(c, r)
	checkHostBits(c, plan, r)
	checkMapped(c, plan, r)
	checkOverlaps(plan, r)
	checkReserved(plan, r)
	checkDNSServiceIP(c, r)
	checkSiteGateways(c, r)
	checkGatewayAddresses(c, sites, r)
	checkNodes(c, sites, r)
	checkRouterAddress(c, sites, r)
	if !opts.SkipPrivateKey {
		checkPrivateKey(c, r, opts)
		checkKeyFiles(c, r, opts)
	}
	remote := remoteIndex(c, plan, r)
	checkSelfRoute(c, remote, r)
	checkEndpoints(c, remote, r)
	checkNextHopFamilies(c, r)
	checkProbes(c, r)
	checkHubs(c, r)
	checkSitePolicy(c, r)
	checkRelayPlan(c, r, opts)
	checkKubernetesFiles(c, r, opts)
	checkFollowedSelf(c, r)
	if len(r.errs) > 0 {
		problems = r.errs.sorted()
	}
	if len(r.warns) > 0 {
		warnings = r.warns.sorted()
	}
	return problems, warnings, r.ops
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
func checkHostBits(c *Config, plan []cidr, r *reporter) {
	check := func(path string, p netip.Prefix) {
		if p.IsValid() && p.Masked() != p {
			r.errorf(path, "%s has host bits set; did you mean %s?", p, p.Masked())
		}
	}
	for _, x := range plan {
		check(x.path, x.p)
	}
	for i, s := range c.Sites {
		for j, n := range s.Nodes {
			check(nodePath(i, j, "podCIDR"), n.PodCIDR)
		}
	}
}

// checkMapped: no prefix is written as IPv4-mapped IPv6. The data path
// unmaps such a prefix into the IPv4 range it stands for, where it would
// take over routing and anti-spoofing of whatever site owns that range,
// while every check here compares it as IPv6.
func checkMapped(c *Config, plan []cidr, r *reporter) {
	check := func(path string, p netip.Prefix) {
		if !p.IsValid() || !p.Addr().Is4In6() {
			return
		}
		if p.Bits() >= 96 {
			r.errorf(path, "%s is an IPv4-mapped IPv6 prefix; write the IPv4 prefix %s instead", p,
				netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96).Masked())
		} else {
			r.errorf(path, "%s is an IPv4-mapped IPv6 prefix (::ffff:0:0/96 is not routable); write IPv4 prefixes as IPv4", p)
		}
	}
	for _, x := range plan {
		check(x.path, x.p)
	}
	for i, s := range c.Sites {
		for j, n := range s.Nodes {
			check(nodePath(i, j, "podCIDR"), n.PodCIDR)
			check(nodePath(i, j, "podCIDR6"), n.PodCIDR6)
		}
	}
}

// checkOverlaps: no two CIDRs of the address plan overlap. The problem is
// reported on the later one and names both.
func checkOverlaps(plan []cidr, r *reporter) {
	sweepOverlaps(plan, r, func(a, b cidr) {
		r.errorf(b.path, "%s overlaps %s %s (line %d)", b.p, a.path, a.p, r.line(a.path))
	})
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

// checkReserved: no CIDR overlaps a range AKS reserves. The message
// names the reserved ranges and a free private range of the same size.
func checkReserved(plan []cidr, r *reporter) {
	reserved := reservedRanges()
	for _, x := range plan {
		for _, res := range reserved {
			r.ops++
			if x.p.Masked().Overlaps(res) {
				hint := "use another private range"
				if free, ok := freePrivate(plan, reserved, x.p.Bits()); ok {
					hint = fmt.Sprintf("use another private range, such as %s (free in this plan)", free)
				}
				r.errorf(x.path, "%s overlaps %s, which AKS reserves (%s may not hold node, pod or service CIDRs); %s",
					x.p, res, joinPrefixes(reserved), hint)
			}
		}
	}
}

// freePrivate returns the first prefix of bits bits in the RFC 1918
// ranges that overlaps neither the plan nor a reserved range, trying at
// most 256 candidates per range (it only runs for a config in error).
func freePrivate(plan []cidr, reserved []netip.Prefix, bits int) (netip.Prefix, bool) {
	for _, block := range []string{"10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16"} {
		b := netip.MustParsePrefix(block)
		if bits < b.Bits() || bits > 32 {
			continue
		}
		step := uint32(1) << (32 - bits)
		base := b.Addr().As4()
		start := uint32(base[0])<<24 | uint32(base[1])<<16 | uint32(base[2])<<8 | uint32(base[3])
		for i := uint32(0); i < 256 && uint64(i)*uint64(step) < uint64(1)<<(32-b.Bits()); i++ {
			a := start + i*step
			cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(a >> 24), byte(a >> 16), byte(a >> 8), byte(a)}), bits)
			if !overlapsAny(cand, reserved) && !slices.ContainsFunc(plan, func(c cidr) bool { return c.p.Masked().Overlaps(cand) }) {
				return cand, true
			}
		}
	}
	return netip.Prefix{}, false
}

// joinPrefixes is "a, b and c".
func joinPrefixes(ps []netip.Prefix) string {
	s := make([]string, len(ps))
	for i, p := range ps {
		s[i] = p.String()
	}
	if len(s) < 2 {
		return strings.Join(s, "")
	}
	return strings.Join(s[:len(s)-1], ", ") + " and " + s[len(s)-1]
}

func overlapsAny(p netip.Prefix, ps []netip.Prefix) bool {
	return slices.ContainsFunc(ps, p.Overlaps)
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
func checkGatewayAddresses(c *Config, sites []siteIndex, r *reporter) {
	for i, s := range c.Sites {
		for j, g := range s.Gateways {
			path := gatewayPath(i, j, "address")
			switch {
			case !g.Address.IsValid():
				r.errorf(path, "is required: the gateway's address in its site's node network")
			case !sites[i].nodes.containsAddr(g.Address, r):
				r.errorf(path, "%s is not inside the nodeCIDRs of site %q %v", g.Address, s.Name, shortList(s.NodeCIDRs))
			}
			checkAddr6(r, gatewayPath(i, j, "address6"), g.Address6, s, sites[i])
		}
	}
}

func nodePath(site, node int, name string) string {
	return joinPath(indexPath(joinPath(indexPath("sites", site), "nodes"), node), name)
}

// checkNodes: the nodes of each site have unique names, addresses in the
// node CIDRs and disjoint pod CIDRs inside the site's pod CIDRs.
func checkNodes(c *Config, sites []siteIndex, r *reporter) {
	for i, s := range c.Sites {
		names := map[string]string{}
		var pods, pods6 []cidr
		noPods := false // a node has a pod CIDR, the site none
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
			} else if !sites[i].nodes.containsAddr(n.Address, r) {
				r.errorf(addrPath, "%s is not inside the nodeCIDRs of site %q %v", n.Address, s.Name, shortList(s.NodeCIDRs))
			}

			checkAddr6(r, nodePath(i, j, "address6"), n.Address6, s, sites[i])
			if n.PodCIDR6.IsValid() {
				p6 := nodePath(i, j, "podCIDR6")
				switch {
				case !n.PodCIDR6.Addr().Is6():
					r.errorf(p6, "%s is not an IPv6 prefix", n.PodCIDR6)
				case !n.Address6.IsValid():
					r.errorf(p6, "needs address6: the gateway routes %s via the node's IPv6 address", n.PodCIDR6)
				case len(s.PodCIDRs) == 0:
					noPods = true // reported once for the site, below
				case !sites[i].pods.containsPrefix(n.PodCIDR6, r):
					r.errorf(p6, "%s is not inside the podCIDRs of site %q %v", n.PodCIDR6, s.Name, shortList(s.PodCIDRs))
				}
				pods6 = append(pods6, cidr{p6, n.PodCIDR6, i})
			}

			podPath := nodePath(i, j, "podCIDR")
			if !n.PodCIDR.IsValid() {
				r.errorf(podPath, "is required")
				continue
			}
			if len(s.PodCIDRs) == 0 {
				noPods = true
			} else if !sites[i].pods.containsPrefix(n.PodCIDR, r) {
				r.errorf(podPath, "%s is not inside the podCIDRs of site %q %v", n.PodCIDR, s.Name, shortList(s.PodCIDRs))
			}
			pods = append(pods, cidr{podPath, n.PodCIDR, i})
		}
		if noPods {
			// One problem at the site, not one per node: CheckData
			// drops it when the cause is a misspelled podCIDRs, which
			// already has its "did you mean".
			r.errorf(joinPath(indexPath("sites", i), "podCIDRs"),
				"missing: the nodes of site %q have podCIDRs, which must be inside the site's podCIDRs", s.Name)
		}
		for _, list := range [][]cidr{pods6, pods} {
			sweepOverlaps(list, r, func(a, b cidr) {
				r.errorf(b.path, "%s overlaps %s %s (line %d)", b.p, a.path, a.p, r.line(a.path))
			})
		}
	}
}

// checkAddr6: an optional IPv6 LAN address is IPv6 and in the site's
// node CIDRs.
func checkAddr6(r *reporter, path string, a netip.Addr, s Site, x siteIndex) {
	switch {
	case !a.IsValid():
	case !a.Is6() || a.Is4In6():
		r.errorf(path, "%s is not an IPv6 address", a)
	case !x.nodes.containsAddr(a, r):
		r.errorf(path, "%s is not inside the nodeCIDRs of site %q %v", a, s.Name, shortList(s.NodeCIDRs))
	}
}

// checkRouterAddress: a site's routerAddress (and routerAddress6) is in
// its node CIDRs.
func checkRouterAddress(c *Config, sites []siteIndex, r *reporter) {
	for i, s := range c.Sites {
		checkAddr6(r, joinPath(indexPath("sites", i), "routerAddress6"), s.RouterAddress6, s, sites[i])
		if s.RouterAddress.IsValid() && !sites[i].nodes.containsAddr(s.RouterAddress, r) {
			r.errorf(joinPath(indexPath("sites", i), "routerAddress"), "%s is not inside the nodeCIDRs of site %q %v", s.RouterAddress, s.Name, shortList(s.NodeCIDRs))
		}
	}
}

// checkPrivateKey: the private key file exists, parses and belongs to the
// local gateway's publicKey. Group or other access is a problem: the
// daemon refuses to start with it, as ssh refuses such an identity file.
func checkPrivateKey(c *Config, r *reporter, opts CheckOptions) {
	const field = "privateKeyFile"
	path := c.PrivateKeyPath()
	if path == "" {
		r.errorf(field, "is required: the file holding this gateway's private key")
		return
	}
	data, ok := readSecretFile(path, field, "private key", r, opts)
	if !ok {
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
		if c.Follows() {
			// A reimaged gateway with a new key: it registers the key
			// it has, and the published catalog catches up.
			r.warnf(field, "the key in %s has public key %s, but the followed catalog lists %s for this gateway (%s); it registers its own key and the catalog catches up",
				path, base64.StdEncoding.EncodeToString(pub), g.PublicKey, pkPath)
			return
		}
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

// remoteIndex indexes the CIDRs the local gateway routes into the
// tunnel: the node and pod CIDRs of every other site. nil when the local
// site is unknown.
func remoteIndex(c *Config, plan []cidr, r *reporter) *prefixIndex[cidr] {
	si, _ := localIndexes(c)
	if si < 0 {
		return nil
	}
	var remote []cidr
	for _, x := range plan {
		if x.site >= 0 && x.site != si {
			remote = append(remote, x)
		}
	}
	return newPrefixIndex(remote, func(x cidr) netip.Prefix { return x.p }, r)
}

// checkSelfRoute: the local gateway's own addresses are not inside a CIDR
// it routes into the tunnel, or it would send its own traffic to a peer.
func checkSelfRoute(c *Config, remote *prefixIndex[cidr], r *reporter) {
	si, gi := localIndexes(c)
	if si < 0 {
		return
	}
	check := func(path string, a netip.Addr) {
		if !a.IsValid() {
			return
		}
		remote.covering(netip.PrefixFrom(a, a.BitLen()), r, func(x cidr) {
			r.errorf(path, "%s is inside %s %s (line %d) of another site: this gateway would route its own traffic into the tunnel", a, x.path, x.p, r.line(x.path))
		})
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
func checkEndpoints(c *Config, remote *prefixIndex[cidr], r *reporter) {
	si, _ := localIndexes(c)
	if si < 0 {
		return
	}
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
			remote.covering(netip.PrefixFrom(a, a.BitLen()), r, func(x cidr) {
				r.warnf(path, "%s is inside %s %s (line %d), which is routed into the tunnel: tunnel packets to it would loop unless the host routes them outside the tunnel", a, x.path, x.p, r.line(x.path))
			})
			if listen.IsValid() && !dualStack && a.Is4() != listen.Is4() {
				r.warnf(path, "%s cannot be reached from listen address %s (other address family)", a, c.ListenAddr)
			}
		}
	}
}

// checkNextHopFamilies warns about what `bridgehead routes` refuses: a
// site whose nodes need a route to another site's IPv6 (or IPv4) CIDR,
// but which has no next hop of that family (routerAddress6/address6, or
// routerAddress/address). Linux cannot route a destination via a next hop
// of the other family. It is a warning, not a problem: the gateways
// forward all the same, and configs that ran before keep running; but the
// nodes of that site cannot be given routes to those CIDRs.
func checkNextHopFamilies(c *Config, r *reporter) {
	// For each family, the first two sites with CIDRs of it: enough to
	// name "another site" for every site in one pass.
	type owner struct {
		site int
		path string
		p    netip.Prefix
	}
	var first [2][]owner // [0] IPv4, [1] IPv6
	for i, s := range c.Sites {
		sp := indexPath("sites", i)
		for _, list := range []struct {
			field string
			ps    []netip.Prefix
		}{{"nodeCIDRs", s.NodeCIDRs}, {"podCIDRs", s.PodCIDRs}} {
			for k, p := range list.ps {
				r.ops++
				if !p.IsValid() {
					continue
				}
				f := 0
				if p.Addr().Is6() {
					f = 1
				}
				if n := len(first[f]); n < 2 && (n == 0 || first[f][0].site != i) {
					first[f] = append(first[f], owner{i, indexPath(joinPath(sp, list.field), k), p})
				}
			}
		}
	}
	for i, s := range c.Sites {
		if len(s.Gateways) == 0 {
			continue // a problem of its own (checkSiteGateways)
		}
		var has [2]bool
		hop := func(a netip.Addr) {
			if a.IsValid() {
				has[btoi(a.Is6())] = true
			}
		}
		hop(s.RouterAddress)
		hop(s.RouterAddress6)
		for _, g := range s.Gateways {
			hop(g.Address)
			hop(g.Address6)
		}
		for f, fam := range []string{"IPv4", "IPv6"} {
			if has[f] {
				continue
			}
			for _, o := range first[f] {
				if o.site == i {
					continue
				}
				field := "routerAddress/address"
				if f == 1 {
					field = "routerAddress6/address6"
				}
				r.warnf(indexPath("sites", i), "site %q has no %s next hop (%s) for its nodes' routes to %s CIDRs such as %s %s (line %d) of site %q: `bridgehead routes -site %s` fails",
					s.Name, fam, field, fam, o.path, o.p, r.line(o.path), c.Sites[o.site].Name, s.Name)
				break
			}
		}
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// siteIndex holds the containment indexes of one site's CIDRs.
type siteIndex struct {
	nodes, pods *prefixIndex[netip.Prefix]
}

func newSiteIndexes(c *Config, r *reporter) []siteIndex {
	id := func(p netip.Prefix) netip.Prefix { return p }
	out := make([]siteIndex, len(c.Sites))
	for i, s := range c.Sites {
		out[i] = siteIndex{nodes: newPrefixIndex(s.NodeCIDRs, id, r), pods: newPrefixIndex(s.PodCIDRs, id, r)}
	}
	return out
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

// shortList formats a list of prefixes for a message, eliding all but
// the first few of a long one.
func shortList(ps []netip.Prefix) string {
	const show = 4
	if len(ps) <= show+1 {
		return fmt.Sprint(ps)
	}
	return fmt.Sprintf("%v … %d more]", ps[:show], len(ps)-show)
}

// CheckFile loads path and reports every problem in it at once: those
// found while decoding (syntax, unknown fields, values that do not parse)
// together with the address-plan rules of Check, run on whatever decoded.
// A Check problem on a field that already failed to decode is left out, so
// one mistake is reported once. It returns the config only when there are
// no problems.
func CheckFile(path string, opts CheckOptions) (*Config, ErrorList, ErrorList, error) {
	data, err := ReadFile(path)
	if err != nil {
		return nil, nil, nil, err
	}
	c, problems, warnings := CheckData(path, data, opts)
	return c, problems, warnings, nil
}

// CheckData is CheckFile on data already read from path, for a caller
// that compared HashData(data) with the running config first.
// didYouMean matches an unknown field's suggestion (see suggest).
var didYouMean = regexp.MustCompile(`^unknown field \(did you mean "([^"]+)"\?\)$`)

func CheckData(path string, data []byte, opts CheckOptions) (*Config, ErrorList, ErrorList) {
	return defaultLoader().checkData(path, data, opts)
}

// CheckWithCatalog is CheckData with catalog as the contents of the
// followed catalog file (kubernetes.follow), which is not read: the
// follower checks a catalog this way before it writes it. Problems with
// the sites name the catalog file.
func CheckWithCatalog(path string, data, catalog []byte, opts CheckOptions) (*Config, ErrorList, ErrorList) {
	l := defaultLoader()
	l.catalog = catalog
	if l.catalog == nil {
		l.catalog = []byte{}
	}
	return l.checkData(path, data, opts)
}

func (l loader) checkData(path string, data []byte, opts CheckOptions) (*Config, ErrorList, ErrorList) {
	l.gateway = opts.Overrides.Gateway
	c, decodeErrs := l.parseAll(path, data)
	if c == nil {
		return nil, decodeErrs, nil
	}
	problems, warnings := Check(c, opts)
	bad := map[string]bool{}
	for _, e := range decodeErrs {
		bad[e.Field] = true
		// A misspelled field ("podCIDR" for "podCIDRs") leaves the
		// field it meant unset: problems about that are the same mistake.
		if m := didYouMean.FindStringSubmatch(e.Msg); m != nil {
			if i := strings.LastIndexByte(e.Field, '.'); i >= 0 {
				bad[e.Field[:i+1]+m[1]] = true
			} else {
				bad[m[1]] = true
			}
		}
	}
	all := append(ErrorList(nil), decodeErrs...)
	for _, p := range problems {
		if !bad[p.Field] {
			all = append(all, p)
		}
	}
	if len(all) > 0 {
		return nil, all.sorted(), warnings
	}
	return c, nil, warnings
}
