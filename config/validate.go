package config

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"time"
)

// validateBasic runs the checks Parse makes: the minimum for the daemon
// to run. Each rule is its own function.
func validateBasic(c *Config, r *reporter, l loader) {
	checkLocalRefs(c, r)
	checkCipher(c, r)
	checkListen(c, r)
	checkMetricsListen(c, r)
	checkInterface(c, r)
	checkLAN(c, r)
	checkSiteNames(c, r)
	checkGatewayNames(c, r)
	checkPublicKeys(c, r)
	checkKeyRollover(c, r)
	resolveEndpoints(c, r, l)
	checkRelay(c, r)
	checkKubernetes(c, r)
}

// checkLocalRefs: site and gateway are set and name an existing site and
// a gateway of that site.
func checkLocalRefs(c *Config, r *reporter) {
	if c.Site == "" {
		r.errorf("site", "is required: the name of this gateway's site")
	} else if c.LocalSite() == nil && c.Follows() {
		r.errorf("site", "%q is not the name of any site in the followed catalog %s", c.Site, c.CatalogPath())
	} else if c.LocalSite() == nil {
		r.errorf("site", "%q is not the name of any site in sites", c.Site)
	}
	switch {
	case c.Gateway == "":
		r.errorf("gateway", "is required: the name of this gateway")
	case c.LocalSite() != nil && c.LocalGateway() == nil && !c.Follows():
		// A followed catalog lists a gateway once it has registered
		// (checkFollowedSelf warns).
		r.errorf("gateway", "%q is not a gateway of site %q", c.Gateway, c.Site)
	}
}

// Ciphers accepted in Config.Cipher.
const (
	CipherAESGCM     = "aesgcm"
	CipherChaChaPoly = "chachapoly"
)

func checkCipher(c *Config, r *reporter) {
	if c.Cipher != CipherAESGCM && c.Cipher != CipherChaChaPoly {
		r.errorf("cipher", "%q is not a cipher (want %s or %s)", c.Cipher, CipherAESGCM, CipherChaChaPoly)
	}
}

// checkListen parses Listen into ListenAddr.
func checkListen(c *Config, r *reporter) {
	ap, err := netip.ParseAddrPort(c.Listen)
	if err != nil || ap.Addr().Zone() != "" {
		r.errorf("listen", "%q is not IP:port (e.g. 0.0.0.0:51820 or [::]:51820)", c.Listen)
		return
	}
	if ap.Port() == 0 {
		r.errorf("listen", "%q: port 0 is not allowed", c.Listen)
		return
	}
	c.ListenAddr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}

// checkMetricsListen: metrics.listen, when set, is host:port.
func checkMetricsListen(c *Config, r *reporter) {
	if c.Metrics.Listen == "" {
		return
	}
	_, port, err := net.SplitHostPort(c.Metrics.Listen)
	if err == nil {
		_, err = parsePort(port)
	}
	if err != nil {
		r.errorf("metrics.listen", "%q is not host:port (e.g. 127.0.0.1:9090)", c.Metrics.Listen)
	}
}

// maxIfNameLen is IFNAMSIZ-1 on Linux.
const maxIfNameLen = 15

// checkInterface: the name is a valid Linux interface name. The MTU range
// is checked while decoding.
func checkInterface(c *Config, r *reporter) {
	if msg := ifNameProblem(c.Interface.Name); msg != "" {
		r.errorf("interface.name", "%q %s", c.Interface.Name, msg)
	}
}

// checkLAN: lan.interface, when the section is there, is a valid
// interface name and not the tunnel's.
func checkLAN(c *Config, r *reporter) {
	if c.LAN == nil {
		return
	}
	switch {
	case ifNameProblem(c.LAN.Interface) != "":
		r.errorf("lan.interface", "%q %s", c.LAN.Interface, ifNameProblem(c.LAN.Interface))
	case c.LAN.Interface == c.Interface.Name:
		r.errorf("lan.interface", "%q is the tunnel interface (interface.name); name the interface toward this site's nodes", c.LAN.Interface)
	}
	if len(c.LAN.Targets) > maxLANTargets {
		r.errorf("lan.targets", "has %d addresses; at most %d (each is pinged every 100 ms)", len(c.LAN.Targets), maxLANTargets)
	}
	seen := map[netip.Addr]int{}
	for i, a := range c.LAN.Targets {
		path := fmt.Sprintf("lan.targets[%d]", i)
		switch {
		case !a.IsValid():
			// the decoder reported it
		case a.IsUnspecified() || a.IsMulticast() || a.IsLoopback():
			r.errorf(path, "%s is not a unicast address of a host on the LAN", a)
		default:
			if j, dup := seen[a]; dup {
				r.errorf(path, "%s is listed twice (also lan.targets[%d])", a, j)
			}
			seen[a] = i
		}
	}
	if t := c.LAN.TargetTimeout; t != 0 && (t < minLANTargetTimeout || t > maxLANTargetTimeout) {
		r.errorf("lan.targetTimeout", "%s is out of range: want %s to %s (default %s)", t, minLANTargetTimeout, maxLANTargetTimeout, DefaultLANTargetTimeout)
	}
}

// Bounds of the LAN targets: pings go out every 100 ms, so a timeout
// under 200 ms would fire on one late reply.
const (
	maxLANTargets       = 8
	minLANTargetTimeout = 200 * time.Millisecond
	maxLANTargetTimeout = 10 * time.Second
)

func ifNameProblem(name string) string {
	switch {
	case name == "":
		return "is empty"
	case len(name) > maxIfNameLen:
		return fmt.Sprintf("is longer than %d characters", maxIfNameLen)
	case name == "." || name == "..":
		return "is not allowed"
	}
	for _, ch := range name {
		if ch == '/' || ch == ':' || ch <= ' ' || ch == 0x7f || ch > 0x7e {
			return fmt.Sprintf("contains %q (not allowed in an interface name)", ch)
		}
	}
	return ""
}

// maxNameLen bounds site and gateway names (a DNS label).
const maxNameLen = 63

// nameProblem checks a site or gateway name: letters, digits, '.', '_'
// and '-', starting with a letter or digit. The names appear in metrics
// labels, logs and generated route names, so they are kept plain.
func nameProblem(name string) string {
	if name == "" {
		return "is required"
	}
	if len(name) > maxNameLen {
		return fmt.Sprintf("%q is longer than %d characters", name, maxNameLen)
	}
	for i, ch := range name {
		alnum := ch >= 'a' && ch <= 'z' || ch >= 'A' && ch <= 'Z' || ch >= '0' && ch <= '9'
		if !alnum && (i == 0 || (ch != '-' && ch != '_' && ch != '.')) {
			return fmt.Sprintf("%q is not a valid name (letters, digits, '.', '_' and '-', starting with a letter or digit)", name)
		}
	}
	return ""
}

// checkSiteNames: every site has a valid name, unique in the file.
func checkSiteNames(c *Config, r *reporter) {
	seen := map[string]string{}
	for i, s := range c.Sites {
		path := joinPath(indexPath("sites", i), "name")
		if msg := nameProblem(s.Name); msg != "" {
			r.errorf(path, "%s", msg)
			continue
		}
		if first, dup := seen[s.Name]; dup {
			r.errorf(path, "duplicate site name %q (also %s, line %d)", s.Name, first, r.line(first))
			continue
		}
		seen[s.Name] = path
	}
}

// checkGatewayNames: every gateway has a valid name, unique in its site.
func checkGatewayNames(c *Config, r *reporter) {
	for i, s := range c.Sites {
		seen := map[string]string{}
		for j, g := range s.Gateways {
			path := joinPath(indexPath(joinPath(indexPath("sites", i), "gateways"), j), "name")
			if msg := nameProblem(g.Name); msg != "" {
				r.errorf(path, "%s", msg)
				continue
			}
			if first, dup := seen[g.Name]; dup {
				r.errorf(path, "duplicate gateway name %q in site %q (also %s, line %d)", g.Name, s.Name, first, r.line(first))
				continue
			}
			seen[g.Name] = path
		}
	}
}

// checkPublicKeys: every gateway has a valid public key, and no two
// gateways share one (peers are told apart by their static key).
func checkPublicKeys(c *Config, r *reporter) {
	seen := map[string]string{}
	for i, s := range c.Sites {
		for j, g := range s.Gateways {
			path := gatewayPath(i, j, "publicKey")
			if g.PublicKey == "" {
				r.errorf(path, "is required")
				continue
			}
			b, err := parsePublicKey(g.PublicKey)
			if err != nil {
				r.errorf(path, "%q %v", g.PublicKey, err)
				continue
			}
			if first, dup := seen[string(b)]; dup {
				r.errorf(path, "same key as %s (line %d); every gateway needs its own key", first, r.line(first))
				continue
			}
			seen[string(b)] = path
		}
	}
}

func gatewayPath(site, gw int, name string) string {
	return joinPath(indexPath(joinPath(indexPath("sites", site), "gateways"), gw), name)
}

func parsePort(s string) (uint16, error) {
	p, err := strconv.ParseUint(s, 10, 16)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%q is not a port number (1-65535)", s)
	}
	return uint16(p), nil
}

// resolveEndpoints parses every gateway endpoint into EndpointAddr,
// resolving hostnames with l.lookupHost. A gateway without endpoint is
// behind NAT (hubs.go): EndpointAddr stays invalid.
func resolveEndpoints(c *Config, r *reporter, l loader) {
	for i := range c.Sites {
		for j := range c.Sites[i].Gateways {
			g := &c.Sites[i].Gateways[j]
			path := gatewayPath(i, j, "endpoint")
			if g.Endpoint == "" {
				continue
			}
			ap, err := l.resolveEndpoint(g.Endpoint, c.ListenAddr)
			if err != nil {
				r.errorf(path, "%v", err)
				continue
			}
			g.EndpointAddr = ap
		}
	}
}

// resolveEndpoint parses host:port. A hostname is looked up; when it has
// several addresses, the first of the listen address's family is taken
// (any family when listening on the IPv6 wildcard, which is dual-stack).
func (l loader) resolveEndpoint(s string, listen netip.AddrPort) (netip.AddrPort, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil || host == "" {
		return netip.AddrPort{}, fmt.Errorf("%q is not host:port (IPv6 as [fd00::1]:51820)", s)
	}
	port, err := parsePort(portStr)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: %v", s, err)
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" {
			return netip.AddrPort{}, fmt.Errorf("%q: zoned addresses are not supported", s)
		}
		return netip.AddrPortFrom(a.Unmap(), port), nil
	}
	if strings.ContainsAny(host, " \t/%[]") {
		return netip.AddrPort{}, fmt.Errorf("%q: %q is not an IP address or hostname", s, host)
	}
	if l.lookupHost == nil {
		return netip.AddrPort{}, fmt.Errorf("%q: cannot resolve %q: no resolver", s, host)
	}
	ctx, cancel := context.WithTimeout(context.Background(), resolveTimeout)
	defer cancel()
	names, err := l.lookupHost(ctx, host)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("%q: cannot resolve %q: %v", s, host, err)
	}
	var first, same netip.Addr
	for _, n := range names {
		a, err := netip.ParseAddr(n)
		if err != nil || a.Zone() != "" {
			continue
		}
		a = a.Unmap()
		if !first.IsValid() {
			first = a
		}
		if !same.IsValid() && a.Is4() == listen.Addr().Is4() {
			same = a
		}
	}
	pick := same
	if !pick.IsValid() || (listen.Addr().Is6() && listen.Addr().IsUnspecified()) {
		pick = first
	}
	if !pick.IsValid() {
		return netip.AddrPort{}, fmt.Errorf("%q: %q has no IP addresses", s, host)
	}
	return netip.AddrPortFrom(pick, port), nil
}
