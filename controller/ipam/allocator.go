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
	// removed counts the sites kept after RemoveSite for their holders.
	removed int
}

type site struct {
	cfg     Site
	pools   [2]pool
	holders int // nodes holding blocks of this site (not counting pending)
	// removed: RemoveSite was called while nodes still held blocks (or
	// had them in their grace). The site stays, with no pools, so that its
	// holdings stay reserved and its pod CIDRs refuse other sites, until
	// the last of them is gone.
	removed bool
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
	// stray are blocks the node holds that its site's pool no longer
	// contains (a pod CIDR removed, the block size changed, the site
	// removed): the node's pods still use them, so they stay the node's,
	// outside any bitmap; a family has a block or a stray, not both.
	stray [2]netip.Prefix
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

// SetSite adds or replaces a site's pool configuration. A node whose
// block the new pools do not contain (as a block) keeps it, reserved
// outside the pool (OutOfPool lists it), and is returned (sorted) for the
// caller to report: it is never given another block of that family, and
// when the pool contains the block again it is the node's. A site whose
// pod CIDRs overlap each other, another site's (a removed site's too,
// while its nodes hold blocks) or a block another site's node holds
// outside its pool, is refused, with nothing changed.
func (a *Allocator) SetSite(cfg Site) (stranded []string, err error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if old, ok := a.sites[cfg.Name]; ok && !old.removed && sameSite(old.cfg, cfg) {
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
		for _, h := range a.nodes {
			if h.site.cfg.Name == cfg.Name {
				continue
			}
			for _, q := range h.stray {
				if q.IsValid() && q.Overlaps(p) {
					return nil, fmt.Errorf("site %s: pod CIDR %s overlaps block %s that node %s of site %s still holds", cfg.Name, p, q, h.node, h.site.cfg.Name)
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
	if old.removed {
		old.removed = false
		a.removed--
	}
	old.cfg = cfg
	return a.repool(old, pools), nil
}

// repool gives s the pools and moves its holdings (holders and pending)
// over to them, by prefix: a block the new pools contain is set there, any
// other stays the holding's, as a stray. It returns the holders with a
// stray, sorted.
func (a *Allocator) repool(s *site, pools [2]pool) (stranded []string) {
	s.pools = pools
	move := func(h *holding) bool {
		ok := true
		for f := range h.blocks {
			p := h.stray[f]
			if b := h.blocks[f]; b.sp != nil {
				p = b.sp.block(b.idx)
			}
			if !p.IsValid() {
				continue
			}
			h.blocks[f], h.stray[f] = block{}, netip.Prefix{}
			nb, found := s.pools[f].find(p)
			if !found || nb.sp.isSet(nb.idx) {
				h.stray[f] = p
				ok = false
				continue
			}
			nb.sp.set(nb.idx)
			h.blocks[f] = nb
		}
		return ok
	}
	// Holders first, in name order, then the graces: a block claimed twice
	// (which the bitmaps never allow) would go to the live node.
	if s.holders > 0 {
		for _, name := range sortedKeys(a.nodes) {
			if h := a.nodes[name]; h.site == s && !move(h) {
				stranded = append(stranded, name)
			}
		}
	}
	for _, p := range a.pending[a.head:] {
		if !p.dead && p.h.site == s {
			move(p.h)
		}
	}
	return stranded
}

// OutOfPool returns the blocks node holds that its site's pool does not
// contain (see SetSite).
func (a *Allocator) OutOfPool(node string) []netip.Prefix {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.nodes[node]
	if h == nil {
		return nil
	}
	var out []netip.Prefix
	for _, p := range h.list().List() {
		if p == h.stray[familyOf(p)] {
			out = append(out, p)
		}
	}
	return out
}

// RemoveSite forgets a site's pools. Its holders keep their blocks, as
// strays (see SetSite), and are returned (sorted); the site is forgotten
// once no node holds a block of it or has one in its grace, and until
// then its pod CIDRs refuse other sites. Allocate and Adopt refuse it.
// Setting it again gives the holders their blocks back in its pools.
func (a *Allocator) RemoveSite(name string) (stranded []string) {
	a.mu.Lock()
	defer a.mu.Unlock()
	s, ok := a.sites[name]
	if !ok || s.removed {
		return nil
	}
	s.removed = true
	a.removed++
	stranded = a.repool(s, [2]pool{})
	a.collect()
	return stranded
}

// collect forgets the removed sites that nothing holds any more.
func (a *Allocator) collect() {
	if a.removed == 0 {
		return
	}
	inGrace := map[*site]bool{}
	for _, p := range a.pending[a.head:] {
		if !p.dead {
			inGrace[p.h.site] = true
		}
	}
	for name, s := range a.sites {
		if s.removed && s.holders == 0 && !inGrace[s] {
			delete(a.sites, name)
			a.removed--
		}
	}
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
	if !ok || s.removed {
		return Blocks{}, fmt.Errorf("site %s: %w", siteName, ErrUnknownSite)
	}
	h := a.nodes[node]
	if h != nil && h.site != s {
		return Blocks{}, &OtherSiteError{Node: node, Site: siteName, Holding: h.site.cfg.Name}
	}
	h, fresh := a.holdingOf(s, node, h)
	var taken [2]bool
	for f := range s.pools {
		if h.blocks[f].sp != nil || h.stray[f].IsValid() || len(s.pools[f].spans) == 0 {
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
	return a.adoptIn(siteName, node, cidrs, false)
}

// AdoptLive is Adopt for CIDRs that the node's pods use now (what the
// controller recorded on it): a CIDR that lies wholly outside the site's
// pool of its family is held anyway, outside the pool (OutOfPool lists
// it; no Problem), since giving the node another would leave its pods
// with dead addresses.
func (a *Allocator) AdoptLive(siteName, node string, cidrs []netip.Prefix) (Blocks, []Problem, error) {
	return a.adoptIn(siteName, node, cidrs, true)
}

// holdingOf is node's holding in site s: h when it has one, else the
// one its pending release revives, else a new one (fresh true), not yet
// held.
func (a *Allocator) holdingOf(s *site, node string, h *holding) (_ *holding, fresh bool) {
	if h == nil {
		if p := a.byNode[pendingKey{s, node}]; p != nil {
			h = a.revive(p)
		}
	}
	if h == nil {
		return &holding{node: node, site: s}, true
	}
	return h, false
}

// adoptIn is Adopt (live false) and AdoptLive (live true).
func (a *Allocator) adoptIn(siteName, node string, cidrs []netip.Prefix, live bool) (Blocks, []Problem, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.expire()
	s, ok := a.sites[siteName]
	if !ok || s.removed {
		return Blocks{}, nil, fmt.Errorf("site %s: %w", siteName, ErrUnknownSite)
	}
	b, probs := a.adopt(s, node, cidrs, live)
	return b, probs, nil
}

func (a *Allocator) adopt(s *site, node string, cidrs []netip.Prefix, live bool) (Blocks, []Problem) {
	h := a.nodes[node]
	if h != nil && h.site != s {
		var probs []Problem
		for _, c := range cidrs {
			probs = append(probs, Problem{Node: node, Site: s.cfg.Name, CIDR: c, Reason: WrongSite, Other: h.site.cfg.Name})
		}
		return Blocks{}, probs
	}
	h, fresh := a.holdingOf(s, node, h)
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
		case h.stray[f].IsValid():
			seen[f] = true
			if c != h.stray[f] {
				prob(c, Mismatch, "")
			}
			continue
		case live && h.blocks[f].sp == nil && !s.pools[f].overlaps(c):
			seen[f] = true
			h.stray[f] = c
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
	if fresh && (h.blocks[0].sp != nil || h.blocks[1].sp != nil || h.stray[0].IsValid() || h.stray[1].IsValid()) {
		a.hold(h)
	}
	return h.list(), probs
}

// Release starts the grace of node's blocks; after it they return to the
// pool. Releasing a node that holds nothing does nothing.
func (a *Allocator) Release(node string) { a.release(node, true) }

// Forget frees what node holds at once, without a grace: for blocks the
// caller never recorded on the node (its record names others).
func (a *Allocator) Forget(node string) { a.release(node, false) }

// release gives node's blocks back: after the grace when grace is set
// (and the allocator has one), else at once.
func (a *Allocator) release(node string, grace bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	h := a.nodes[node]
	if h == nil {
		return
	}
	a.unhold(h)
	defer a.collect()
	if !grace || a.grace <= 0 {
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
	// Live: the node's pods use CIDRs now; they are adopted as AdoptLive
	// does (held even outside the pool).
	Live bool
}

// Holdings returns every holder's entry, sorted by node; Rebuild(Holdings())
// gives back the same holdings.
func (a *Allocator) Holdings() []Entry {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Entry, 0, len(a.nodes))
	for _, name := range sortedKeys(a.nodes) {
		h := a.nodes[name]
		out = append(out, Entry{Node: name, Site: h.site.cfg.Name, CIDRs: h.list().List(), Live: true})
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
		if s.removed {
			// Its nodes keep their blocks, reserved (see RemoveSite).
			if a.nodes[e.Node] == nil {
				h := &holding{node: e.Node, site: s}
				for _, c := range e.CIDRs {
					if f := familyOf(c); !h.stray[f].IsValid() {
						h.stray[f] = c
					}
				}
				a.hold(h)
			}
			continue
		}
		_, pp := a.adopt(s, e.Node, e.CIDRs, e.Live)
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
	a.collect()
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
	dropped := false
	defer func() {
		if dropped {
			a.collect()
		}
	}()
	for a.head < len(a.pending) {
		p := a.pending[a.head]
		if !p.dead {
			if p.expires.After(now) {
				break
			}
			a.drop(p)
			dropped = true
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
		h.stray[f] = netip.Prefix{}
	}
}

func (h *holding) list() Blocks {
	var b Blocks
	for f, bl := range h.blocks {
		p := h.stray[f]
		if bl.sp != nil {
			p = bl.sp.block(bl.idx)
		}
		if !p.IsValid() {
			continue
		}
		if f == int(IPv6) {
			b.V6 = p
		} else {
			b.V4 = p
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
