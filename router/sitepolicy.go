package router

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/bridgehead/bridgehead/router/lpm"
)

// Site source allow-lists: a site may name the remote sites whose pod
// CIDRs may reach it through the gateways at all (SiteConfig.
// AllowedSources; nil: every site). It is defence in depth beneath the
// nodes' NetworkPolicy, by site, not by pod:
//
//   - the sending gateway drops a packet from one of its own site's pod
//     CIDRs to a site that does not list its site, before sealing it
//     (inside path, route);
//   - the receiving gateway drops a packet from a remote site's pod CIDR
//     that its own site does not list, right after opening it and
//     checking its source, before delivery (outside path,
//     openTransport): a sender with an older config, or one that ignores
//     the list, gets nothing through.
//
// Node CIDRs are never restricted (kubelets, the API server and probes
// cross sites on them), nor is a site's own traffic. Both drops count as
// ReasonSitePolicy and in bridgehead_site_policy_drops_total{direction,
// site}, site being the remote site (the destination inside, the source
// outside).
//
// Everything is decided when a config is built (buildSourcePolicy): each
// site of the routing state carries two booleans and the pod CIDRs sit
// in one prefix table, so a packet to or from a site without a list
// costs one boolean test, and one that a list concerns one lookup in
// that table; neither allocates.

// sitePolicy is one remote site's place in the allow-lists, part of the
// immutable routingState (so read without locks by every loop).
type sitePolicy struct {
	// refusesLocal: this site's list leaves out the local site, so
	// packets from the local pod CIDRs may not be sent to it.
	refusesLocal bool
	// refused: the local site's list leaves this site out, so packets
	// from its pod CIDRs may not be delivered.
	refused bool
	// drops counts both; shared with the states before and after this
	// one while the site stays configured.
	drops *sitePolicyDrops
}

// sitePolicyDrops counts one remote site's refused packets by direction.
// Safe for concurrent use; adding allocates nothing.
type sitePolicyDrops struct {
	n [numDirections]atomic.Uint64
}

// sourcePolicy is the routing state's allow-list view: the pod CIDRs of
// every site (to tell a pod source from a node source) and the drop
// counters by remote site name. Built once per state, read-only after.
type sourcePolicy struct {
	pods  *lpm.Table[*site]
	drops map[string]*sitePolicyDrops
}

// buildSourcePolicy checks every site's AllowedSources against the site
// list and fills in st's sites' policies and st.sources, reusing old's
// counters for sites still configured. It runs in buildState, before the
// state is published, and changes nothing running.
func buildSourcePolicy(c *Config, st *routingState, old *routingState) error {
	sp := sourcePolicy{pods: &lpm.Table[*site]{}, drops: make(map[string]*sitePolicyDrops, len(c.Sites))}
	local := c.LocalSite
	var localList []string
	localRestricted := false
	for _, sc := range c.Sites {
		for _, name := range sc.AllowedSources {
			if _, ok := st.sites[name]; !ok {
				return fmt.Errorf("router: site %q: allowedSources names %q, which is not a site", sc.Name, name)
			}
		}
		if sc.Name == local {
			localList, localRestricted = sc.AllowedSources, sc.AllowedSources != nil
		}
	}
	for _, sc := range c.Sites {
		s := st.sites[sc.Name]
		for _, pfx := range sc.PodPrefixes {
			if !pfx.IsValid() {
				return fmt.Errorf("router: site %q: invalid pod prefix", sc.Name)
			}
			sp.pods.Insert(pfx, s)
		}
		if s.local {
			continue
		}
		d := old.policyDrops(sc.Name)
		if d == nil {
			d = new(sitePolicyDrops)
		}
		sp.drops[sc.Name] = d
		s.policy = sitePolicy{
			refusesLocal: sc.AllowedSources != nil && !slices.Contains(sc.AllowedSources, local),
			refused:      localRestricted && !slices.Contains(localList, sc.Name),
			drops:        d,
		}
	}
	st.sources = sp
	return nil
}

// policyDrops is the counters of the site named in st (nil when st is
// nil or the site has none).
func (st *routingState) policyDrops(name string) *sitePolicyDrops {
	if st == nil {
		return nil
	}
	return st.sources.drops[name]
}

// sendRefused reports whether pkt, bound for the remote site s, comes
// from a local pod CIDR that s's list refuses. The inside path calls it
// only when s.policy.refusesLocal; it allocates nothing.
func (st *routingState) sendRefused(s *site, pkt []byte) bool {
	src, ok := innerSource(pkt)
	if !ok {
		return false // not IP: the destination check already dropped it
	}
	from, ok := st.sources.pods.Lookup(src)
	return ok && from == st.local
}

// receiveRefused reports whether src, the source of a packet that the
// remote site s sent (its source already checked to be in s), is in s's
// pod CIDRs while the local site's list refuses s. It allocates nothing.
func (st *routingState) receiveRefused(s *site, src netip.Addr) bool {
	if !s.policy.refused {
		return false
	}
	from, ok := st.sources.pods.Lookup(src)
	return ok && from == s
}

// refuse counts one packet that s's policy dropped in direction dir.
func (r *Router) refuse(dir Direction, s *site) {
	r.drops.Add(dir, ReasonSitePolicy, 1)
	s.policy.drops.n[dir].Add(1)
}

// innerSource is the source address of an IPv4 or IPv6 packet.
func innerSource(pkt []byte) (netip.Addr, bool) {
	if len(pkt) == 0 {
		return netip.Addr{}, false
	}
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) >= 20 {
			return netip.AddrFrom4([4]byte(pkt[12:16])), true
		}
	case 6:
		if len(pkt) >= 40 {
			return netip.AddrFrom16([16]byte(pkt[8:24])), true
		}
	}
	return netip.Addr{}, false
}

// SitePolicyDrops is one remote site's refused packets (see
// bridgehead_site_policy_drops_total).
type SitePolicyDrops struct {
	Site string
	// Inside: packets from local pods that the site's list refuses,
	// dropped before sealing. Outside: packets from the site's pods that
	// the local list refuses, dropped after opening.
	Inside, Outside uint64
	// RefusesLocal and Refused say whether a list applies, in each
	// direction, in the config in force.
	RefusesLocal, Refused bool
}

// SitePolicyDrops lists every remote site of the config in force, by
// name, with its counters. Any goroutine; off the packet path.
func (r *Router) SitePolicyDrops() []SitePolicyDrops {
	st := r.state.Load()
	if st == nil {
		return nil
	}
	out := make([]SitePolicyDrops, 0, len(st.sites))
	for _, s := range st.sites {
		if !s.local {
			out = append(out, sitePolicyRow(s))
		}
	}
	slices.SortFunc(out, func(a, b SitePolicyDrops) int { return strings.Compare(a.Site, b.Site) })
	return out
}

func sitePolicyRow(s *site) SitePolicyDrops {
	return SitePolicyDrops{
		Site: s.name, Inside: s.policy.drops.n[Inside].Load(), Outside: s.policy.drops.n[Outside].Load(),
		RefusesLocal: s.policy.refusesLocal, Refused: s.policy.refused,
	}
}
