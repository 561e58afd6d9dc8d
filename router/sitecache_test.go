package router

import (
	"net/netip"
	"testing"
)

// TestSiteCache: a cache answers what the table answers, for hits, misses,
// addresses without a route, and a new state (a reload) with the same
// address.
func TestSiteCache(t *testing.T) {
	a, b := &site{name: "a"}, &site{name: "b"}
	st1 := &routingState{}
	st1.table.Insert(netip.MustParsePrefix("10.1.0.0/16"), a)
	st1.table.Insert(netip.MustParsePrefix("10.1.2.0/24"), b)
	st2 := &routingState{}
	st2.table.Insert(netip.MustParsePrefix("10.1.0.0/16"), b)
	var c siteCache
	for i, tc := range []struct {
		st   *routingState
		addr string
		want *site
	}{
		{st1, "10.1.1.1", a},
		{st1, "10.1.1.1", a}, // hit
		{st1, "10.1.2.1", b}, // longer prefix
		{st1, "10.9.0.1", nil},
		{st1, "10.9.0.1", nil}, // cached miss
		{st1, "10.1.1.1", a},
		{st2, "10.1.1.1", b}, // reloaded: same address, new answer
		{st2, "10.1.2.1", b},
		{st1, "10.1.2.1", b},
		{st1, "fd00::1", nil},
	} {
		s, ok := c.lookup(tc.st, netip.MustParseAddr(tc.addr))
		if s != tc.want || ok != (tc.want != nil) {
			t.Errorf("%d: lookup(%s) = %v, %v; want %v", i, tc.addr, s, ok, tc.want)
		}
	}
}

// BenchmarkSiteCache: a cache hit against a lookup in a table of 100k
// /28 prefixes.
func BenchmarkSiteCache(b *testing.B) {
	st := &routingState{}
	s := &site{name: "x"}
	for i := range 100_000 {
		st.table.Insert(netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i << 4)}), 28), s)
	}
	addr := netip.MustParseAddr("10.3.7.5")
	b.Run("hit", func(b *testing.B) {
		var c siteCache
		for b.Loop() {
			c.lookup(st, addr)
		}
	})
	b.Run("lookup", func(b *testing.B) {
		for b.Loop() {
			st.table.Lookup(addr)
		}
	})
}
