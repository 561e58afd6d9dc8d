package lpm

import (
	"math/rand/v2"
	"net/netip"
	"testing"
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
