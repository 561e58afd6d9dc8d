package config

import (
	"encoding/base64"
	"slices"
	"strings"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Sites behind NAT (see package transit for the data path).
//
// A gateway may have no endpoint: it sits behind NAT, nothing can open a
// session toward it, so it opens its sessions toward every gateway that
// has an endpoint and keeps them open. Two gateways that both lack an
// endpoint reach each other through a hub: a site whose gateways relay
// their end-to-end sealed datagrams without reading them. A site's hubs
// are the sites its `via` names or, without `via`, every other site that
// has a gateway with an endpoint (HubsOf). Check refuses what cannot
// work (checkHubs).

// HasEndpoint reports whether the gateway can be reached at a configured
// endpoint.
func (g *Gateway) HasEndpoint() bool { return g.Endpoint != "" }

// hasEndpoint reports whether some gateway of s has an endpoint: s can
// be a hub, and the gateways of other sites can start sessions with it.
func (s *Site) hasEndpoint() bool {
	return slices.ContainsFunc(s.Gateways, func(g Gateway) bool { return g.HasEndpoint() })
}

// needsHub reports whether some gateway of s has no endpoint: only such
// a gateway is ever relayed.
func (s *Site) needsHub() bool {
	return slices.ContainsFunc(s.Gateways, func(g Gateway) bool { return !g.HasEndpoint() })
}

// behindNAT reports whether s has gateways and none has an endpoint.
func (s *Site) behindNAT() bool { return len(s.Gateways) > 0 && !s.hasEndpoint() }

// HubsOf returns the sites the named site relays through toward gateways
// that neither it nor they can reach directly (both without endpoint):
// its `via` if set, else every other site with a gateway endpoint, in
// catalog order. Only the hub's gateways with an endpoint relay. A site
// whose gateways all have an endpoint needs no hub and has none, `via`
// or not: every gateway reaches it directly, and a hub must not relay
// for it. A hub relays between two sites only if both name it (package
// transit, Plan.Allowed): the destination's `via` binds as much as the
// source's.
func (c *Config) HubsOf(site string) []string {
	s := c.SiteByName(site)
	if s == nil || !s.needsHub() {
		return nil
	}
	if len(s.Via) > 0 {
		return slices.Clone(s.Via)
	}
	var out []string
	for i := range c.Sites {
		if s := &c.Sites[i]; s.Name != site && s.hasEndpoint() {
			out = append(out, s.Name)
		}
	}
	return out
}

// CanBeRelayed reports whether the local gateway's datagrams can go
// through a hub, each wrapped in a relay message (bhcrypto.RelayOverhead
// more bytes on the wire): it has no endpoint and its site has a hub, so
// it reaches every gateway of another site without an endpoint that way
// (now, or after a reload adds one; a direct path found through the NATs
// can fall back to the hub at any time). Its tunnel MTU must leave room
// for the relay header.
func (c *Config) CanBeRelayed() bool {
	gw := c.LocalGateway()
	return gw != nil && !gw.HasEndpoint() && len(c.HubsOf(c.Site)) > 0
}

// WANMTU is the WAN MTU a written interface.mtu is checked against: that
// of Ethernet, and of most clouds' and carriers' paths.
const WANMTU = 1500

// Hubs returns HubsOf for every site.
func (c *Config) Hubs() map[string][]string {
	m := make(map[string][]string, len(c.Sites))
	for i := range c.Sites {
		m[c.Sites[i].Name] = c.HubsOf(c.Sites[i].Name)
	}
	return m
}

// checkHubs: every `via` entry names another site that has a gateway
// endpoint, once; the via entries form no cycle; a site whose gateways
// all lack an endpoint has a hub whenever another such site exists
// (else the two could never reach each other); `via` on a site whose
// gateways all have endpoints is a warning (nothing uses it). Gateways
// have distinct key IDs, by which hubs address them.
func checkHubs(c *Config, r *reporter) {
	byName := make(map[string]int, len(c.Sites))
	for i, s := range c.Sites {
		byName[s.Name] = i
	}
	valid := make([][]int, len(c.Sites)) // via edges that passed
	for i := range c.Sites {
		s := &c.Sites[i]
		seen := map[string]bool{}
		for j, h := range s.Via {
			path := indexPath(joinPath(indexPath("sites", i), "via"), j)
			r.ops++
			hi, ok := byName[h]
			switch {
			case !ok:
				r.errorf(path, "%q is not a site%s", h, suggestSite(h, c.Sites))
			case h == s.Name:
				r.errorf(path, "%q is this site itself; name the sites it relays through", h)
			case seen[h]:
				r.errorf(path, "%q is listed twice", h)
			case !c.Sites[hi].hasEndpoint():
				r.errorf(path, "hub %q has no gateway with an endpoint (sites[%d], line %d): a hub must be reachable by every site it serves", h, hi, r.line(indexPath("sites", hi)))
			default:
				valid[i] = append(valid[i], hi)
			}
			seen[h] = true
		}
		if len(s.Via) > 0 && len(s.Gateways) > 0 && !s.needsHub() {
			r.warnf(joinPath(indexPath("sites", i), "via"), "has no effect: every gateway of site %q has an endpoint, so every other site reaches it directly", s.Name)
		}
	}
	checkHubCycles(c, valid, r)
	checkUnreachable(c, r)
	checkKeyIDs(c, r)
	checkRelayMTU(c, r)
}

// checkRelayMTU (warning): on a gateway that can be relayed, an
// interface.mtu written in the file whose full-size datagrams, wrapped in
// a relay message, exceed WANMTU toward a hub gateway. Those are lost or
// fragmented on most WANs. The default and "auto" leave room for the
// relay header (the daemon lowers them), so only a written number can be
// too large.
func checkRelayMTU(c *Config, r *reporter) {
	m := c.Interface.MTU
	if m.Auto || m.Default || m.Value == 0 || !c.CanBeRelayed() {
		return
	}
	outerIP := 20 // IPv4, unless a hub gateway is reached over IPv6
	for _, h := range c.HubsOf(c.Site) {
		s := c.SiteByName(h)
		if s == nil {
			continue // checkHubs reports it
		}
		for _, g := range s.Gateways {
			if a := g.EndpointAddr.Addr(); a.IsValid() && !a.Is4() && !a.Is4In6() {
				outerIP = 40
			}
		}
	}
	wire := m.Value + outerIP + 8 + bhcrypto.TransportOverhead + bhcrypto.RelayOverhead
	if wire <= WANMTU {
		return
	}
	fit := m.Value - (wire - WANMTU)
	r.warnf("interface.mtu", "%d is too large for datagrams relayed through a hub: a full-size one is %d bytes on the WAN (%d of relay header included), over %d; set %d or less, or leave mtu out (this gateway then uses %d)",
		m.Value, wire, bhcrypto.RelayOverhead, WANMTU, fit, DefaultMTU-bhcrypto.RelayOverhead)
}

// checkHubCycles reports each cycle of via edges once, at the entry that
// closes it.
func checkHubCycles(c *Config, via [][]int, r *reporter) {
	const (
		white = iota
		grey
		black
	)
	color := make([]int, len(c.Sites))
	var stack []int
	var visit func(i int)
	visit = func(i int) {
		color[i] = grey
		stack = append(stack, i)
		for _, h := range via[i] {
			r.ops++
			switch color[h] {
			case white:
				visit(h)
			case grey:
				start := slices.Index(stack, h)
				names := make([]string, 0, len(stack)-start+1)
				for _, k := range stack[start:] {
					names = append(names, c.Sites[k].Name)
				}
				names = append(names, c.Sites[h].Name)
				j := slices.Index(c.Sites[i].Via, c.Sites[h].Name)
				r.errorf(indexPath(joinPath(indexPath("sites", i), "via"), j), "cycle of hubs: %s; a hub is reached directly and relays for others, it needs no hub toward them", strings.Join(names, " → "))
			}
		}
		stack = stack[:len(stack)-1]
		color[i] = black
	}
	for i := range c.Sites {
		if color[i] == white {
			visit(i)
		}
	}
}

// checkUnreachable: a site behind NAT (no gateway endpoint) with no hub,
// while another site is behind NAT too: those two could never reach each
// other.
func checkUnreachable(c *Config, r *reporter) {
	var nat []int
	for i := range c.Sites {
		if c.Sites[i].behindNAT() {
			nat = append(nat, i)
		}
	}
	if len(nat) < 2 {
		return
	}
	checkSharedHubs(c, r)
	for _, i := range nat {
		s := &c.Sites[i]
		if len(s.Via) > 0 || len(c.HubsOf(s.Name)) > 0 {
			continue
		}
		other := nat[0]
		if other == i {
			other = nat[1]
		}
		r.errorf(joinPath(indexPath("sites", i), "gateways"), "no gateway of site %q has an endpoint and it has no hub: it cannot reach site %q (sites[%d], line %d), which has none either; give a gateway an endpoint, or add a site with one to relay (via)",
			s.Name, c.Sites[other].Name, other, r.line(indexPath("sites", other)))
	}
}

// checkSharedHubs: two sites behind NAT whose hubs (via) have none in
// common cannot reach each other: a hub relays only between sites that
// both name it. Sites are grouped by their hub list, so a catalog of many
// sites with a few distinct lists costs a few comparisons.
func checkSharedHubs(c *Config, r *reporter) {
	type group struct {
		hubs  []string
		first int // the first site with these hubs
	}
	var groups []group
	seen := map[string]bool{}
	for i := range c.Sites {
		s := &c.Sites[i]
		if !s.behindNAT() {
			continue
		}
		hubs := c.HubsOf(s.Name)
		if slices.ContainsFunc(hubs, func(h string) bool { hs := c.SiteByName(h); return hs == nil || hs == s || !hs.hasEndpoint() }) {
			continue // checkHubs reports the bad entry
		}
		if len(hubs) == 0 {
			continue // checkUnreachable reports it
		}
		key := strings.Join(hubs, "\x00")
		if seen[key] {
			continue
		}
		seen[key] = true
		for _, g := range groups {
			r.ops++
			if slices.ContainsFunc(hubs, func(h string) bool { return slices.Contains(g.hubs, h) }) {
				continue
			}
			o := &c.Sites[g.first]
			path := joinPath(indexPath("sites", i), "via")
			if len(s.Via) == 0 {
				path = joinPath(indexPath("sites", i), "gateways")
			}
			r.errorf(path, "site %q relays through %s and site %q (sites[%d], line %d) through %s: they share no hub, and a hub relays only between sites that both name it, so they cannot reach each other; name a common hub in both",
				s.Name, strings.Join(hubs, ", "), o.Name, g.first, r.line(indexPath("sites", g.first)), strings.Join(g.hubs, ", "))
		}
		groups = append(groups, group{hubs, i})
	}
}

// checkKeyIDs: no two gateways share the first 8 bytes of their public
// key (crypto.KeyID), which hubs address them by. Random keys never do;
// a catalog made to collide would let one gateway receive relayed
// datagrams meant for another (which it could not open).
func checkKeyIDs(c *Config, r *reporter) {
	type first struct{ path, key string }
	seen := map[string]first{}
	for i, s := range c.Sites {
		for j, g := range s.Gateways {
			b, err := base64.StdEncoding.DecodeString(g.PublicKey)
			if err != nil || len(b) != 32 {
				continue // checkPublicKeys reports it
			}
			path := gatewayPath(i, j, "publicKey")
			id := string(b[:8])
			// The same key twice is checkPublicKeys' to report.
			if f, dup := seen[id]; dup && f.key != string(b) {
				r.errorf(path, "starts with the same 8 bytes as %s (line %d), by which hubs tell gateways apart; generate a new key", f.path, r.line(f.path))
				continue
			}
			seen[id] = first{path, string(b)}
		}
	}
}

// suggestSite returns ` (did you mean "x"?)` for the site name closest to
// name, or "".
func suggestSite(name string, sites []Site) string {
	fields := make([]field, 0, len(sites))
	for _, s := range sites {
		fields = append(fields, field{name: s.Name})
	}
	return suggest(name, fields)
}
