package ipam

import (
	"net/netip"
	"slices"
	"time"
)

// Released is a deleted node's blocks in their release grace: what a new
// Allocator (a new leader) needs to keep them out of the pool until
// Expires, since Rebuild sees only the nodes that still exist.
type Released struct {
	Node, Site string
	CIDRs      []netip.Prefix
	// Expires is when the blocks return to the pool.
	Expires time.Time
}

// Pending returns the holdings in their release grace, sorted by expiry
// then node.
func (a *Allocator) Pending() []Released {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	var out []Released
	for _, p := range a.pending[a.head:] {
		if p.dead {
			continue
		}
		if l := p.h.list().List(); len(l) > 0 {
			out = append(out, Released{Node: p.h.node, Site: p.h.site.cfg.Name, CIDRs: l, Expires: p.expires})
		}
	}
	slices.SortStableFunc(out, func(x, y Released) int {
		if c := x.Expires.Compare(y.Expires); c != 0 {
			return c
		}
		if x.Node < y.Node {
			return -1
		}
		if x.Node > y.Node {
			return 1
		}
		return 0
	})
	return out
}

// Restore puts released holdings back in their grace until their Expires,
// after a Rebuild: each CIDR that is a block of its site's pool and held
// by nobody is taken out of the pool again. An entry is skipped, with a
// Problem per CIDR, when its site is unknown or a CIDR is no block of the
// pool or is held already (a node that exists claimed it, so it is
// not in its grace any more); an entry that expired, or whose node holds
// blocks or is in its grace already, is skipped silently. Restore keeps
// the grace a node's blocks had when it was released, whoever released
// it.
func (a *Allocator) Restore(rs []Released) []Problem {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	now := a.now()
	var probs []Problem
	added := false
	for _, r := range rs {
		if !r.Expires.After(now) || a.nodes[r.Node] != nil {
			continue
		}
		s, ok := a.sites[r.Site]
		if !ok {
			for _, c := range r.CIDRs {
				probs = append(probs, Problem{Node: r.Node, Site: r.Site, CIDR: c, Reason: UnknownSite})
			}
			continue
		}
		if a.byNode[pendingKey{s, r.Node}] != nil {
			continue
		}
		h := &holding{node: r.Node, site: s}
		for _, c := range r.CIDRs {
			f := familyOf(c)
			b, found := s.pools[f].find(c)
			switch {
			case !found:
				probs = append(probs, Problem{Node: r.Node, Site: r.Site, CIDR: c, Reason: OutOfPool})
			case h.blocks[f].sp != nil:
				probs = append(probs, Problem{Node: r.Node, Site: r.Site, CIDR: c, Reason: SecondOfFamily})
			case b.sp.isSet(b.idx):
				probs = append(probs, Problem{Node: r.Node, Site: r.Site, CIDR: c, Reason: Conflict, Other: a.holderOf(b)})
			default:
				b.sp.set(b.idx)
				h.blocks[f] = b
			}
		}
		if h.blocks[0].sp == nil && h.blocks[1].sp == nil {
			continue
		}
		p := &pendingEntry{h: h, expires: r.Expires}
		a.pending = append(a.pending, p)
		a.byNode[pendingKey{s, r.Node}] = p
		added = true
	}
	if added {
		// expire walks pending in expiry order from head.
		live := a.pending[a.head:]
		slices.SortStableFunc(live, func(x, y *pendingEntry) int { return x.expires.Compare(y.expires) })
	}
	return probs
}
