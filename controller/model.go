package controller

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"github.com/bridgehead/bridgehead/controller/ipam"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// site is the controller's model of a Site: what matching and allocation
// need, free of client-go types.
type site struct {
	name      string
	nodeCIDRs []netip.Prefix
	pool      ipam.Site
}

// parseSite turns a Site into the model; the error names the field.
func parseSite(s *v1alpha1.Site) (site, error) {
	m := site{name: s.Name, pool: ipam.Site{Name: s.Name, BlockBits4: int(s.Spec.PodBlockSize), BlockBits6: int(s.Spec.PodBlockSize6)}}
	if m.pool.BlockBits4 == 0 {
		m.pool.BlockBits4 = 24
	}
	if m.pool.BlockBits6 == 0 {
		m.pool.BlockBits6 = 80
	}
	parse := func(field string, in []v1alpha1.CIDR) ([]netip.Prefix, error) {
		var out []netip.Prefix
		for i, c := range in {
			p, err := netip.ParsePrefix(string(c))
			if err != nil {
				return nil, fmt.Errorf("spec.%s[%d] %q: not a CIDR", field, i, c)
			}
			if p.Masked() != p {
				return nil, fmt.Errorf("spec.%s[%d] %q: host bits set (want %s)", field, i, c, p.Masked())
			}
			out = append(out, p)
		}
		return out, nil
	}
	var err error
	if m.nodeCIDRs, err = parse("nodeCIDRs", s.Spec.NodeCIDRs); err != nil {
		return site{}, err
	}
	if m.pool.PodCIDRs, err = parse("podCIDRs", s.Spec.PodCIDRs); err != nil {
		return site{}, err
	}
	for _, p := range m.pool.PodCIDRs {
		bb, field := m.pool.BlockBits4, "podBlockSize"
		if p.Addr().Is6() {
			bb, field = m.pool.BlockBits6, "podBlockSize6"
		}
		if bb < p.Bits() || bb > p.Addr().BitLen() {
			return site{}, fmt.Errorf("spec.%s %d: does not fit pod CIDR %s", field, bb, p)
		}
	}
	return m, nil
}

func (s site) sameNodeCIDRs(o site) bool {
	if len(s.nodeCIDRs) != len(o.nodeCIDRs) {
		return false
	}
	for i := range s.nodeCIDRs {
		if s.nodeCIDRs[i] != o.nodeCIDRs[i] {
			return false
		}
	}
	return true
}

// overlapProblems returns, per site name, the overlaps of its node CIDRs
// and pod CIDRs with other sites' (a message naming both fields), for the
// Valid condition. Sites with an overlap take no part in matching.
func overlapProblems(sites map[string]site) map[string]string {
	type owned struct {
		p     netip.Prefix
		site  string
		field string
	}
	var all []owned
	for _, s := range sites {
		for i, p := range s.nodeCIDRs {
			all = append(all, owned{p, s.name, fmt.Sprintf("spec.nodeCIDRs[%d]", i)})
		}
		for i, p := range s.pool.PodCIDRs {
			all = append(all, owned{p, s.name, fmt.Sprintf("spec.podCIDRs[%d]", i)})
		}
	}
	// CIDRs overlap only by nesting: sorted by address (shorter first), a
	// prefix overlaps exactly the following ones that start within it.
	sort.Slice(all, func(i, j int) bool {
		if c := all[i].p.Addr().Compare(all[j].p.Addr()); c != 0 {
			return c < 0
		}
		return all[i].p.Bits() < all[j].p.Bits()
	})
	probs := map[string][]string{}
	for i := range all {
		last := lastAddr(all[i].p)
		for j := i + 1; j < len(all) && all[j].p.Addr().Compare(last) <= 0; j++ {
			a, b := all[i], all[j]
			if a.site == b.site {
				continue
			}
			probs[a.site] = append(probs[a.site], fmt.Sprintf("%s %s overlaps %s %s of site %s", a.field, a.p, b.field, b.p, b.site))
			probs[b.site] = append(probs[b.site], fmt.Sprintf("%s %s overlaps %s %s of site %s", b.field, b.p, a.field, a.p, a.site))
		}
	}
	out := map[string]string{}
	for s, ps := range probs {
		sort.Strings(ps)
		out[s] = strings.Join(ps, "; ")
	}
	return out
}

func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr()
	b := a.AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	out, _ := netip.AddrFromSlice(b)
	return out
}

// matcher finds the sites whose node CIDRs hold an address. It is
// immutable; the controller swaps a new one in when sites change.
type matcher struct {
	entries []matchEntry // sorted by prefix length, longest first
}

type matchEntry struct {
	p    netip.Prefix
	site string
}

func newMatcher(sites map[string]site, exclude map[string]string) *matcher {
	m := &matcher{}
	for _, s := range sites {
		if _, bad := exclude[s.name]; bad {
			continue
		}
		for _, p := range s.nodeCIDRs {
			m.entries = append(m.entries, matchEntry{p, s.name})
		}
	}
	sort.Slice(m.entries, func(i, j int) bool { return m.entries[i].p.Bits() > m.entries[j].p.Bits() })
	return m
}

// match returns the distinct sites holding any of ips, sorted.
func (m *matcher) match(ips []netip.Addr) []string {
	var out []string
	for _, ip := range ips {
		for _, e := range m.entries {
			if e.p.Contains(ip) && !contains(out, e.site) {
				out = append(out, e.site)
			}
		}
	}
	sort.Strings(out)
	return out
}

func contains(ss []string, s string) bool {
	for _, x := range ss {
		if x == s {
			return true
		}
	}
	return false
}
