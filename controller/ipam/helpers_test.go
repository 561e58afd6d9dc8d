package ipam

import (
	"fmt"
	"math/bits"
	"net/netip"
	"testing"
	"time"
)

// fakeClock is a settable clock for release graces.
type fakeClock struct{ t time.Time }

func (c *fakeClock) Now() time.Time      { return c.t }
func (c *fakeClock) Add(d time.Duration) { c.t = c.t.Add(d) }
func newClock() *fakeClock               { return &fakeClock{t: time.Unix(1_800_000_000, 0)} }
func mustPrefix(s string) netip.Prefix   { return netip.MustParsePrefix(s) }
func prefixes(ss ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range ss {
		out = append(out, mustPrefix(s))
	}
	return out
}

// checkInvariants verifies, from the inside, that no block is held twice,
// that every bitmap's count matches its bits, and that every set bit
// belongs to a holder or a pending entry.
func checkInvariants(t testing.TB, a *Allocator) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	owner := map[block]string{}
	claim := func(who string, h *holding) {
		for _, b := range h.blocks {
			if b.sp == nil {
				continue
			}
			if !b.sp.isSet(b.idx) {
				t.Fatalf("%s holds %s but its bit is clear", who, b.sp.block(b.idx))
			}
			if o, dup := owner[b]; dup {
				t.Fatalf("block %s held twice: %s and %s", b.sp.block(b.idx), o, who)
			}
			owner[b] = who
		}
	}
	holders := map[*site]int{}
	for name, h := range a.nodes {
		if h.node != name {
			t.Fatalf("holding %q indexed as %q", h.node, name)
		}
		claim(name, h)
		holders[h.site]++
	}
	for _, p := range a.pending[a.head:] {
		if !p.dead {
			claim("pending "+p.h.node, p.h)
			if a.byNode[pendingKey{p.h.site, p.h.node}] != p {
				t.Fatalf("pending %s not indexed", p.h.node)
			}
		}
	}
	for name, s := range a.sites {
		if holders[s] != s.holders {
			t.Fatalf("site %s: holders %d, counted %d", name, s.holders, holders[s])
		}
		for f := range s.pools {
			for _, sp := range s.pools[f].spans {
				n := 0
				for _, w := range sp.words {
					n += bits.OnesCount64(w)
				}
				pad := int(uint32(len(sp.words))*64 - sp.n)
				if n-pad != int(sp.used) {
					t.Fatalf("span %s: used %d, bits %d", sp.prefix, sp.used, n-pad)
				}
				for i := uint32(0); i < sp.n; i++ {
					if sp.isSet(i) {
						if _, ok := owner[block{sp, i}]; !ok {
							t.Fatalf("span %s: block %s set with no holder", sp.prefix, sp.block(i))
						}
					}
				}
			}
		}
	}
}

func holdingsString(es []Entry) string { return fmt.Sprint(es) }
