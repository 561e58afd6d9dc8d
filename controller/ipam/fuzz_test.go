package ipam

import (
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

// FuzzAllocator runs random sequences of Allocate, Adopt, Release,
// Rebuild, clock steps and site changes over small pools (so exhaustion
// and reuse happen often) and checks after every step that no block is
// held twice, no two held prefixes overlap, the bitmaps match the
// holdings, and a Rebuild from Holdings gives back the same state.
func FuzzAllocator(f *testing.F) {
	f.Add([]byte{0, 0, 0, 3, 0, 6, 1, 0, 2, 0, 0, 9, 3, 20, 0, 0})
	f.Add([]byte{0, 1, 0, 4, 0, 7, 0, 10, 5, 0, 0, 1, 2, 0, 4, 13, 1, 4, 6, 0})
	f.Add([]byte{4, 0, 4, 3, 4, 6, 0, 0, 1, 0, 0, 3, 3, 5, 0, 0, 3, 11, 0, 0})
	f.Fuzz(func(t *testing.T, ops []byte) {
		clk := newClock()
		a := New(Options{Now: clk.Now, Grace: 10 * time.Second})
		s1a := Site{Name: "s1", PodCIDRs: prefixes("10.1.0.0/29", "10.1.1.0/30"), BlockBits4: 30}
		s1b := Site{Name: "s1", PodCIDRs: prefixes("10.1.0.0/30", "10.1.4.0/30"), BlockBits4: 30}
		mustSet(t, a, Site{Name: "s0", PodCIDRs: prefixes("10.0.0.0/28", "fd00::/62"), BlockBits4: 30, BlockBits6: 64})
		mustSet(t, a, s1a)
		mustSet(t, a, Site{Name: "s2", PodCIDRs: prefixes("fd01::/126"), BlockBits6: 127})
		sites := []string{"s0", "s1", "s2"}
		nodes := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
		// Candidate CIDRs for Adopt: blocks, misfits and strangers.
		cands := prefixes("10.0.0.0/30", "10.0.0.4/30", "10.0.0.12/30", "fd00::/64", "fd00:0:0:3::/64",
			"10.1.0.4/30", "10.1.1.0/30", "10.1.4.0/30", "fd01::/127", "fd01::2/127", "10.0.0.0/29", "10.9.0.0/30", "fd00::/63", "10.0.0.8/30")
		s1 := false
		for i := 0; i+1 < len(ops); i += 2 {
			op, arg := ops[i]%7, int(ops[i+1])
			site, node := sites[arg%3], nodes[arg/3%8]
			switch op {
			case 0:
				a.Allocate(site, node)
			case 1:
				a.Release(node)
			case 2, 6:
				before := a.Holdings()
				stats := allStats(a, sites)
				in := slices.Clone(before)
				if op == 6 {
					slices.Reverse(in)
				}
				if probs := a.Rebuild(in); len(probs) > 0 {
					t.Fatalf("rebuild from holdings: %v", probs)
				}
				if after := a.Holdings(); !reflect.DeepEqual(before, after) {
					t.Fatalf("rebuild changed holdings\n%v\n%v", before, after)
				}
				if after := allStats(a, sites); !reflect.DeepEqual(stats, after) {
					t.Fatalf("rebuild changed stats\n%+v\n%+v", stats, after)
				}
			case 3:
				clk.Add(time.Duration(arg%16) * time.Second)
			case 4:
				c := cands[arg%len(cands)]
				a.Adopt(site, node, []netip.Prefix{c})
			case 5:
				s1 = !s1
				cfg := s1a
				if s1 {
					cfg = s1b
				}
				mustSet(t, a, cfg)
			}
			checkInvariants(t, a)
			var held []netip.Prefix
			for _, e := range a.Holdings() {
				held = append(held, e.CIDRs...)
			}
			for x := range held {
				for y := x + 1; y < len(held); y++ {
					if held[x].Overlaps(held[y]) {
						t.Fatalf("held %s and %s overlap", held[x], held[y])
					}
				}
			}
		}
	})
}

func allStats(a *Allocator, sites []string) []Stats {
	var out []Stats
	for _, s := range sites {
		out = append(out, a.Stats(s))
	}
	return out
}
