package lpm

import (
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

// TestAgainstReference compares Table with the naive reference on random
// nested prefixes of both families and random lookups, many of them inside
// inserted prefixes.
func TestAgainstReference(t *testing.T) {
	for seed := uint64(1); seed <= 8; seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x6c706d))
		gen := prefixGen{rng: rng}
		var tab Table[int]
		var ref naive[int]
		nRoutes := 50 + rng.IntN(400)
		for i := range nRoutes {
			p := gen.next()
			tab.Insert(p, i)
			ref.insert(p, i)
		}
		if tab.Len() != len(ref.routes) {
			t.Fatalf("seed %d: Len = %d, reference has %d", seed, tab.Len(), len(ref.routes))
		}
		for range 3000 {
			var a netip.Addr
			switch rng.IntN(4) {
			case 0:
				a = randAddr(rng, 32)
			case 1:
				a = randAddr(rng, 128)
			default:
				a = randInside(rng, gen.seen[rng.IntN(len(gen.seen))])
			}
			if a.Is4() && rng.IntN(8) == 0 {
				a = netip.AddrFrom16(a.As16()) // IPv4-mapped
			}
			wantP, wantV, wantOK := ref.lookup(a)
			gotP, gotV, gotOK := tab.LookupPrefix(a)
			if gotP != wantP || gotV != wantV || gotOK != wantOK {
				t.Fatalf("seed %d: LookupPrefix(%v) = %v, %d, %v; want %v, %d, %v",
					seed, a, gotP, gotV, gotOK, wantP, wantV, wantOK)
			}
			v, ok := tab.Lookup(a)
			if v != wantV || ok != wantOK {
				t.Fatalf("seed %d: Lookup(%v) = %d, %v; want %d, %v", seed, a, v, ok, wantV, wantOK)
			}
		}
		checkAll(t, &tab, &ref)
	}
}

// checkAll verifies that All yields exactly the reference routes, in
// netip.Prefix.Compare order with IPv4 first.
func checkAll(t *testing.T, tab *Table[int], ref *naive[int]) {
	t.Helper()
	want := slices.Clone(ref.routes)
	slices.SortFunc(want, func(a, b naiveRoute[int]) int { return a.p.Compare(b.p) })
	var got []naiveRoute[int]
	for p, v := range tab.All {
		got = append(got, naiveRoute[int]{p, v})
	}
	if !slices.Equal(got, want) {
		t.Fatalf("All yielded %v\nwant %v", got, want)
	}
}
