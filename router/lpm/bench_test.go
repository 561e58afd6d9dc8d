package lpm

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"

	"github.com/bridgehead/bridgehead/bench/catalog"
)

// benchTable fills a table with n random prefixes, half IPv4 (/8 to /32)
// and half IPv6 (/16 to /128), and returns random addresses that hit them.
func benchTable(n int) (*Table[int], []netip.Addr) {
	rng := rand.New(rand.NewPCG(uint64(n), 42))
	tab := &Table[int]{}
	prefixes := make([]netip.Prefix, 0, n)
	for i := range n {
		var p netip.Prefix
		if i%2 == 0 {
			p = netip.PrefixFrom(randAddr(rng, 32), 8+rng.IntN(25))
		} else {
			p = netip.PrefixFrom(randAddr(rng, 128), 16+rng.IntN(113))
		}
		tab.Insert(p, i)
		prefixes = append(prefixes, p.Masked())
	}
	addrs := make([]netip.Addr, 1<<16)
	for i := range addrs {
		addrs[i] = randInside(rng, prefixes[rng.IntN(len(prefixes))])
	}
	return tab, addrs
}

func benchLookup(b *testing.B, n int) {
	tab, addrs := benchTable(n)
	b.ReportAllocs()
	b.ResetTimer()
	hits := 0
	for i := 0; b.Loop(); i++ {
		if _, ok := tab.Lookup(addrs[i&(len(addrs)-1)]); ok {
			hits++
		}
	}
	if hits == 0 {
		b.Fatal("no hits")
	}
}

func BenchmarkLookup10(b *testing.B)   { benchLookup(b, 10) }
func BenchmarkLookup100k(b *testing.B) { benchLookup(b, 100_000) }

func BenchmarkLookup10k(b *testing.B) { benchLookup(b, 10_000) }

// catalogTable is the routing table of a generated catalog (package
// bench/catalog: 200 sites x 3 gateways, /25 pod prefixes in 10.0.0.0/8
// and a /24 node CIDR per site) with n pod prefixes, and addresses that
// hit its prefixes at random: the shape issue #14 measures.
func catalogTable(tb testing.TB, n int) (*Table[int], []netip.Addr) {
	tb.Helper()
	sites := min(200, n)
	c, err := catalog.New(catalog.Options{Sites: sites, Gateways: 3, Prefixes: n})
	if err != nil {
		tb.Fatal(err)
	}
	tab := &Table[int]{}
	var prefixes []netip.Prefix
	for i, s := range c.Sites {
		tab.Insert(s.NodeCIDR, i)
		prefixes = append(prefixes, s.NodeCIDR)
		for _, p := range s.Pods {
			tab.Insert(p, i)
			prefixes = append(prefixes, p)
		}
	}
	rng := rand.New(rand.NewPCG(uint64(n), 7))
	addrs := make([]netip.Addr, 1<<16)
	for i := range addrs {
		addrs[i] = randInside(rng, prefixes[rng.IntN(len(prefixes))])
	}
	return tab, addrs
}

// BenchmarkLookupCatalog: route lookup ns/op at 10, 10,000 and 100,000
// catalog prefixes. A trie walk is bounded by the address length (at most
// four 8-bit strides for IPv4), so the work per lookup must stay flat as
// the table grows: "hot" cycles over 256 destinations, whose nodes stay
// in cache, and shows the walk itself; "random" spreads over the whole
// table, and what it adds at 100k is cache misses (the table is ~7 MiB),
// not steps. A table that degraded to a scan would be 10^4 times slower.
func BenchmarkLookupCatalog(b *testing.B) {
	for _, n := range []int{10, 10_000, 100_000} {
		tab, addrs := catalogTable(b, n)
		for _, set := range []struct {
			name string
			mask int
		}{{"hot", 255}, {"random", len(addrs) - 1}} {
			b.Run(fmt.Sprintf("%s/prefixes=%d", set.name, n), func(b *testing.B) {
				b.ReportAllocs()
				hits := 0
				for i := 0; b.Loop(); i++ {
					if _, ok := tab.Lookup(addrs[i&set.mask]); ok {
						hits++
					}
				}
				if hits == 0 {
					b.Fatal("no hits")
				}
			})
		}
	}
}

// BenchmarkBuildCatalog: building the table of a catalog, which every
// reload does (the router swaps in a new table whole).
func BenchmarkBuildCatalog(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		c, err := catalog.New(catalog.Options{Prefixes: n})
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("prefixes=%d", n), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				tab := &Table[int]{}
				for i, s := range c.Sites {
					tab.Insert(s.NodeCIDR, i)
					for _, p := range s.Pods {
						tab.Insert(p, i)
					}
				}
				if tab.Len() != c.PrefixCount() {
					b.Fatalf("%d routes, want %d", tab.Len(), c.PrefixCount())
				}
			}
		})
	}
}
