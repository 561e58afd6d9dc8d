package router

import "net/netip"

// siteCache remembers the last lookup of one address in one routing
// state's table. The packets of a batch mostly belong to one or a few
// flows, and those of the next batch to the same ones, so most packets
// repeat the previous packet's lookup; a hit costs two comparisons instead
// of a walk down the prefix tree, which grows with the catalog (100k
// prefixes).
//
// Ownership: each batch (insideBatch, outsideBatch) owns its caches and
// only the goroutine handling that batch uses them, so there is no lock.
// A reload publishes a new routingState, and a lookup in it misses, so a
// cache never answers from a superseded table; until that miss, the cache
// keeps the superseded state reachable (one state per cache at most).
type siteCache struct {
	st   *routingState
	addr netip.Addr
	s    *site
	ok   bool
}

// lookup returns st.table.Lookup(a), from the cache when the previous
// call asked the same state for the same address.
func (c *siteCache) lookup(st *routingState, a netip.Addr) (*site, bool) {
	if c.st == st && c.addr == a {
		return c.s, c.ok
	}
	s, ok := st.table.Lookup(a)
	*c = siteCache{st: st, addr: a, s: s, ok: ok}
	return s, ok
}
