package ipam

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"
)

// Family is an address family.
type Family int

// The two families.
const (
	IPv4 Family = iota
	IPv6
)

func (f Family) String() string {
	if f == IPv6 {
		return "IPv6"
	}
	return "IPv4"
}

func familyOf(p netip.Prefix) Family {
	if p.Addr().Is4() {
		return IPv4
	}
	return IPv6
}

// Site is a site's pool configuration.
type Site struct {
	Name string
	// PodCIDRs are the site's pod ranges, IPv4 and/or IPv6, in order of
	// preference within a family. The family of the first one comes first
	// in Blocks.List.
	PodCIDRs []netip.Prefix
	// BlockBits4 and BlockBits6 are the prefix lengths of one node's block
	// (for example 24 and 64). Only the families present in PodCIDRs need one.
	BlockBits4, BlockBits6 int
}

// Blocks are one node's blocks; a zero Prefix means none of that family.
type Blocks struct {
	V4, V6 netip.Prefix
	// V6First puts V6 first in List (the site's first pod CIDR is IPv6).
	V6First bool
}

// List returns the blocks present, the site's primary family first (the
// order of a Node's spec.podCIDRs).
func (b Blocks) List() []netip.Prefix {
	var out []netip.Prefix
	first, second := b.V4, b.V6
	if b.V6First {
		first, second = b.V6, b.V4
	}
	for _, p := range []netip.Prefix{first, second} {
		if p.IsValid() {
			out = append(out, p)
		}
	}
	return out
}

func (b Blocks) get(f Family) netip.Prefix {
	if f == IPv6 {
		return b.V6
	}
	return b.V4
}

// Options configure an Allocator.
type Options struct {
	// Now is the clock for release graces; nil means time.Now.
	Now func() time.Time
	// Grace is how long a released block stays out of the pool.
	Grace time.Duration
}

// Allocator hands out pod blocks per site. See the package doc.
type Allocator struct {
	now   func() time.Time
	grace time.Duration

	mu    sync.Mutex
	sites map[string]*site
	nodes map[string]*holding // holders, by node name
	// pending are released holdings in their grace, oldest first (the
	// grace is one duration, so this is expiry order); head is the first
	// entry not yet processed. byNode indexes the live ones.
	pending []*pendingEntry
	head    int
	byNode  map[pendingKey]*pendingEntry
}

type site struct {
	cfg     Site
	pools   [2]pool
	holders int // nodes holding blocks of this site (not counting pending)
}

type pool struct {
	spans []*span
}

// block is one block: a span and an index in it; a nil span means none.
type block struct {
	sp  *span
	idx uint32
}

type holding struct {
	node   string
	site   *site
	blocks [2]block
}

// pendingKey indexes pending entries: a node has at most one per site.
type pendingKey struct {
	site *site
	node string
}

// pendingEntry is a released holding in its grace. dead marks an entry
// already freed early or revived; expire skips it.
type pendingEntry struct {
	h       *holding
	expires time.Time
	dead    bool
}

// New returns an empty Allocator.
func New(o Options) *Allocator {
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Allocator{
		now:    o.Now,
		grace:  o.Grace,
		sites:  map[string]*site{},
		nodes:  map[string]*holding{},
		byNode: map[pendingKey]*pendingEntry{},
	}
}

// SetSite adds or replaces a site's pool configuration. Holdings of the site
// that no longer fit the new pools are dropped and their nodes returned
// (sorted), for the caller to report or allocate again. A site whose pod
// CIDRs overlap each other or another site's is refused, with nothing
// changed.
func (a *Allocator) SetSite(cfg Site) (evicted []string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.sites[cfg.Name]; ok && sameSite(old.cfg, cfg) {
		return nil, nil
	}
	var pools [2]pool
	for i, p := range cfg.PodCIDRs {
		if !p.IsValid() || p.Masked() != p {
			return nil, fmt.Errorf("site %s: pod CIDR %s is not a network address", cfg.Name, p)
		}
		f := familyOf(p)
		bb := cfg.BlockBits4
		if f == IPv6 {
			bb = cfg.BlockBits6
		}
		for _, q := range cfg.PodCIDRs[:i] {
			if q.Overlaps(p) {
				return nil, fmt.Errorf("site %s: pod CIDRs %s and %s overlap", cfg.Name, q, p)
			}
		}
		for name, o := range a.sites {
			if name == cfg.Name {
				continue
			}
			for _, q := range o.cfg.PodCIDRs {
				if q.Overlaps(p) {
					return nil, fmt.Errorf("site %s: pod CIDR %s overlaps %s of site %s", cfg.Name, p, q, name)
				}
			}
		}
		sp, err := newSpan(p, bb)
		if err != nil {
			return nil, fmt.Errorf("site %s: %w", cfg.Name, err)
		}
		pools[f].spans = append(pools[f].spans, sp)
	}
	cfg.PodCIDRs = append([]netip.Prefix(nil), cfg.PodCIDRs...)
	old, ok := a.sites[cfg.Name]
	if !ok {
		a.sites[cfg.Name] = &site{cfg: cfg, pools: pools}
		return nil, nil
	}
	// Move the holdings over to the new spans, by prefix.
	old.cfg, old.pools = cfg, pools
	move := func(h *holding) bool {
		ok := true
		for f := range h.blocks {
			b := h.blocks[f]
			if b.sp == nil {
				continue
			}
			h.blocks[f] = block{}
			nb, found := old.pools[f].find(b.sp.block(b.idx))
			if !found || nb.sp.isSet(nb.idx) {
				ok = false
				continue
			}
			nb.sp.set(nb.idx)
			h.blocks[f] = nb
		}
		return ok
	}
	if old.holders > 0 {
		for _, name := range sortedKeys(a.nodes) {
			h := a.nodes[name]
			if h.site == old && !move(h) {
				a.unhold(h)
				evicted = append(evicted, name)
			}
		}
	}
	for _, p := range a.pending[a.head:] {
		if !p.dead && p.h.site == old && !move(p.h) {
			a.drop(p)
		}
	}
	return evicted, nil
}

// RemoveSite forgets a site; its holders are returned (sorted) and hold
// nothing any more. Blocks in their grace are forgotten with the site.
func (a *Allocator) RemoveSite(name string) (evicted []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sites[name]
	if !ok {
		return nil
	}
	if s.holders > 0 {
		for _, n := range sortedKeys(a.nodes) {
			if h := a.nodes[n]; h.site == s {
				a.unhold(h)
				evicted = append(evicted, n)
			}
		}
	}
	for _, p := range a.pending[a.head:] {
		if !p.dead && p.h.site == s {
			a.drop(p)
		}
	}
	delete(a.sites, name)
	return evicted
}

// Allocate makes node hold one block of each family that site has, keeping
// blocks it already holds, and returns them. A node released within the
// grace gets its old blocks back. It fails with an *ExhaustedError (taking
// nothing) when a family has no free block, and with an *OtherSiteError
// when the node holds blocks of another site.
func (a *Allocator) Allocate(siteName, node string) (Blocks, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	s, ok := a.sites[siteName]
	if !ok {
		return Blocks{}, fmt.Errorf("site %s: %w", siteName, ErrUnknownSite)
	}
	h := a.nodes[node]
	if h != nil && h.site != s {
		return Blocks{}, &OtherSiteError{Node: node, Site: siteName, Holding: h.site.cfg.Name}
	}
	if h == nil {
		if p := a.byNode[pendingKey{s, node}]; p != nil {
			h = a.revive(p)
		}
	}
	fresh := h == nil
	if fresh {
		h = &holding{node: node, site: s}
	}
	var taken [2]bool
	for f := range s.pools {
		if h.blocks[f].sp != nil || len(s.pools[f].spans) == 0 {
			continue
		}
		b, ok := s.pools[f].take()
		if !ok {
			for g := range taken {
				if taken[g] {
					h.blocks[g].sp.clear(h.blocks[g].idx)
					h.blocks[g] = block{}
				}
			}
			return Blocks{}, &ExhaustedError{Site: siteName, Family: Family(f)}
		}
		h.blocks[f] = b
		taken[f] = true
	}
	if fresh {
		a.hold(h)
	}
	return h.list(), nil
}

// Adopt makes node hold the CIDRs it already has (a Node's spec.podCIDRs or
// recorded annotation) where each is exactly one free block of the site's
// pool. The rest are returned as Problems and not taken. Adopting a node's
// own blocks again is no problem. It returns what the node holds after.
func (a *Allocator) Adopt(siteName, node string, cidrs []netip.Prefix) (Blocks, []Problem, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	s, ok := a.sites[siteName]
	if !ok {
		return Blocks{}, nil, fmt.Errorf("site %s: %w", siteName, ErrUnknownSite)
	}
	b, probs := a.adopt(s, node, cidrs)
	return b, probs, nil
}

func (a *Allocator) adopt(s *site, node string, cidrs []netip.Prefix) (Blocks, []Problem) {
	h := a.nodes[node]
	if h != nil && h.site != s {
		var probs []Problem
		for _, c := range cidrs {
			probs = append(probs, Problem{Node: node, Site: s.cfg.Name, CIDR: c, Reason: WrongSite, Other: h.site.cfg.Name})
		}
		return Blocks{}, probs
	}
	if h == nil {
		if p := a.byNode[pendingKey{s, node}]; p != nil {
			h = a.revive(p)
		}
	}
	fresh := h == nil
	if fresh {
		h = &holding{node: node, site: s}
	}
	var probs []Problem
	var seen [2]bool
	prob := func(c netip.Prefix, r Reason, other string) {
		probs = append(probs, Problem{Node: node, Site: s.cfg.Name, CIDR: c, Reason: r, Other: other})
	}
	for _, c := range cidrs {
		f := familyOf(c)
		switch {
		case seen[f]:
			prob(c, SecondOfFamily, "")
			continue
		case len(s.pools[f].spans) == 0:
			seen[f] = true
			prob(c, NoFamily, "")
			continue
		}
		seen[f] = true
		b, found := s.pools[f].find(c)
		if !found {
			switch {
			case s.pools[f].beyondLimit(c):
				prob(c, BeyondLimit, "")
			case s.pools[f].overlaps(c):
				prob(c, NotBlock, "")
			default:
				prob(c, OutOfPool, "")
			}
			continue
		}
		if cur := h.blocks[f]; cur.sp != nil {
			if cur != b {
				prob(c, Mismatch, "")
			}
			continue
		}
		if b.sp.isSet(b.idx) {
			prob(c, Conflict, a.holderOf(b))
			continue
		}
		b.sp.set(b.idx)
		h.blocks[f] = b
	}
	if fresh && (h.blocks[0].sp != nil || h.blocks[1].sp != nil) {
		a.hold(h)
	}
	return h.list(), probs
}

// Release starts the grace of node's blocks; after it they return to the
// pool. Releasing a node that holds nothing does nothing.
func (a *Allocator) Release(node string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.nodes[node]
	if h == nil {
		return
	}
	a.unhold(h)
	if a.grace <= 0 {
		h.free()
		return
	}
	p := &pendingEntry{h: h, expires: a.now().Add(a.grace)}
	a.pending = append(a.pending, p)
	a.byNode[pendingKey{h.site, node}] = p
}

// Lookup returns what node holds and in which site.
func (a *Allocator) Lookup(node string) (Blocks, string, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.nodes[node]
	if h == nil {
		return Blocks{}, "", false
	}
	return h.list(), h.site.cfg.Name, true
}

// Entry is one node's recorded blocks, for Rebuild.
type Entry struct {
	Node, Site string
	CIDRs      []netip.Prefix
}

// Holdings returns every holder's entry, sorted by node; Rebuild(Holdings())
// gives back the same holdings.
func (a *Allocator) Holdings() []Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Entry, 0, len(a.nodes))
	for _, name := range sortedKeys(a.nodes) {
		h := a.nodes[name]
		out = append(out, Entry{Node: name, Site: h.site.cfg.Name, CIDRs: h.list().List()})
	}
	return out
}

// Rebuild replaces every holding with entries, adopted in the order given
// (the first claimant of a block keeps it). Blocks in their release grace
// stay out of the pool unless an entry claims them. It returns what it
// could not adopt.
func (a *Allocator) Rebuild(entries []Entry) []Problem {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, s := range a.sites {
		for f := range s.pools {
			for _, sp := range s.pools[f].spans {
				sp.reset()
			}
		}
		s.holders = 0
	}
	a.nodes = make(map[string]*holding, len(entries))
	var probs []Problem
	for _, e := range entries {
		s, ok := a.sites[e.Site]
		if !ok {
			for _, c := range e.CIDRs {
				probs = append(probs, Problem{Node: e.Node, Site: e.Site, CIDR: c, Reason: UnknownSite})
			}
			continue
		}
		// A rebuilt holder is not the pending entry of the same name (whose
		// bits were reset above, so it is forgotten, not freed).
		if p := a.byNode[pendingKey{s, e.Node}]; p != nil {
			delete(a.byNode, pendingKey{s, e.Node})
			p.dead = true
		}
		_, pp := a.adopt(s, e.Node, e.CIDRs)
		probs = append(probs, pp...)
	}
	// Blocks still in their grace keep their bits where nobody claimed them.
	for _, p := range a.pending[a.head:] {
		if p.dead {
			continue
		}
		for f, b := range p.h.blocks {
			if b.sp == nil {
				continue
			}
			if b.sp.isSet(b.idx) {
				p.h.blocks[f] = block{}
				continue
			}
			b.sp.set(b.idx)
		}
	}
	a.expire()
	return probs
}

// NextRelease returns when the oldest block in its grace returns to the pool.
func (a *Allocator) NextRelease() (time.Time, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	for _, p := range a.pending[a.head:] {
		if !p.dead {
			return p.expires, true
		}
	}
	return time.Time{}, false
}

// FamilyStats counts one family's blocks of a site.
type FamilyStats struct {
	Blocks  int // in the pool
	Held    int // held by nodes
	Pending int // in their release grace
	Free    int // Blocks - Held - Pending
}

// Stats counts a site's holders and blocks.
type Stats struct {
	Nodes int
	V4    FamilyStats
	V6    FamilyStats
}

// Stats returns the counts of a site (zero for an unknown site).
func (a *Allocator) Stats(siteName string) Stats {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	s, ok := a.sites[siteName]
	if !ok {
		return Stats{}
	}
	var fs [2]FamilyStats
	for f := range s.pools {
		for _, sp := range s.pools[f].spans {
			fs[f].Blocks += int(sp.n)
			fs[f].Free += int(sp.n - sp.used)
		}
	}
	for _, p := range a.pending[a.head:] {
		if p.dead || p.h.site != s {
			continue
		}
		for f, b := range p.h.blocks {
			if b.sp != nil {
				fs[f].Pending++
			}
		}
	}
	for f := range fs {
		fs[f].Held = fs[f].Blocks - fs[f].Free - fs[f].Pending
	}
	return Stats{Nodes: s.holders, V4: fs[IPv4], V6: fs[IPv6]}
}

// --- internals; callers hold a.mu ---

func (a *Allocator) hold(h *holding) {
	a.nodes[h.node] = h
	h.site.holders++
}

func (a *Allocator) unhold(h *holding) {
	delete(a.nodes, h.node)
	h.site.holders--
}

// revive takes a pending holding back as a holder.
func (a *Allocator) revive(p *pendingEntry) *holding {
	delete(a.byNode, pendingKey{p.h.site, p.h.node})
	p.dead = true
	a.hold(p.h)
	return p.h
}

// drop frees a pending holding's blocks now.
func (a *Allocator) drop(p *pendingEntry) {
	delete(a.byNode, pendingKey{p.h.site, p.h.node})
	p.h.free()
	p.dead = true
}

// expire frees the pending holdings whose grace is over.
func (a *Allocator) expire() {
	now := a.now()
	for a.head < len(a.pending) {
		p := a.pending[a.head]
		if !p.dead {
			if p.expires.After(now) {
				break
			}
			a.drop(p)
		}
		a.pending[a.head] = nil
		a.head++
	}
	if a.head > 64 && a.head*2 > len(a.pending) {
		a.pending = append(a.pending[:0], a.pending[a.head:]...)
		a.head = 0
	}
}

func (a *Allocator) holderOf(b block) string {
	for name, h := range a.nodes {
		if h.blocks[0] == b || h.blocks[1] == b {
			return name
		}
	}
	for _, p := range a.pending[a.head:] {
		if !p.dead && (p.h.blocks[0] == b || p.h.blocks[1] == b) {
			return p.h.node + " (released, in grace)"
		}
	}
	return ""
}

func (h *holding) free() {
	for f, b := range h.blocks {
		if b.sp != nil {
			b.sp.clear(b.idx)
			h.blocks[f] = block{}
		}
	}
}

func (h *holding) list() Blocks {
	var b Blocks
	for f, bl := range h.blocks {
		if bl.sp == nil {
			continue
		}
		if f == int(IPv6) {
			b.V6 = bl.sp.block(bl.idx)
		} else {
			b.V4 = bl.sp.block(bl.idx)
		}
	}
	if len(h.site.cfg.PodCIDRs) > 0 && !h.site.cfg.PodCIDRs[0].Addr().Is4() {
		b.V6First = true
	}
	return b
}

func (p *pool) take() (block, bool) {
	for _, sp := range p.spans {
		if i, ok := sp.take(); ok {
			return block{sp, i}, true
		}
	}
	return block{}, false
}

// find returns the block that is exactly c.
func (p *pool) find(c netip.Prefix) (block, bool) {
	for _, sp := range p.spans {
		if i, ok := sp.index(c); ok {
			return block{sp, i}, true
		}
	}
	return block{}, false
}

// beyondLimit reports whether c is an aligned block of a span's prefix
// past the span's 2^20 blocks.
func (p *pool) beyondLimit(c netip.Prefix) bool {
	for _, sp := range p.spans {
		if c.Bits() == sp.prefix.Addr().BitLen()-int(sp.shift) && c.Masked() == c && sp.prefix.Contains(c.Addr()) {
			return true
		}
	}
	return false
}

func (p *pool) overlaps(c netip.Prefix) bool {
	for _, sp := range p.spans {
		if sp.prefix.Overlaps(c) {
			return true
		}
	}
	return false
}

func sameSite(a, b Site) bool {
	if a.BlockBits4 != b.BlockBits4 || a.BlockBits6 != b.BlockBits6 || len(a.PodCIDRs) != len(b.PodCIDRs) {
		return false
	}
	for i := range a.PodCIDRs {
		if a.PodCIDRs[i] != b.PodCIDRs[i] {
			return false
		}
	}
	return true
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
