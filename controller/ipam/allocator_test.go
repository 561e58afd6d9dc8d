package ipam

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestSpanBlocks(t *testing.T) {
	for _, tc := range []struct {
		cidr      string
		blockBits int
		n         uint32
		i         uint32
		want      string
	}{
		{"10.1.0.0/16", 24, 256, 0, "10.1.0.0/24"},
		{"10.1.0.0/16", 24, 256, 255, "10.1.255.0/24"},
		{"10.1.0.0/16", 26, 1024, 5, "10.1.1.64/26"},
		{"10.1.0.0/24", 24, 1, 0, "10.1.0.0/24"},
		{"fd00:1::/48", 64, 65536, 0x1234, "fd00:1:0:1234::/64"},
		{"fd00:1::/60", 80, 1 << 20, 0xfffff, "fd00:1:0:f:ffff::/80"},
		{"fd00:1:0:ff::/64", 84, 1 << 20, 0xabcde, "fd00:1:0:ff:abcd:e000::/84"},
		{"fd00::/108", 128, 1 << 20, 7, "fd00::7/128"},
		// Wider than 2^20 blocks: the first 2^20 are used.
		{"fd00:1::/48", 80, 1 << 20, 1<<20 - 1, "fd00:1:0:f:ffff::/80"},
	} {
		sp, err := newSpan(mustPrefix(tc.cidr), tc.blockBits)
		if err != nil {
			t.Fatalf("%s /%d: %v", tc.cidr, tc.blockBits, err)
		}
		if sp.n != tc.n {
			t.Errorf("%s /%d: %d blocks, want %d", tc.cidr, tc.blockBits, sp.n, tc.n)
		}
		got := sp.block(tc.i)
		if got.String() != tc.want {
			t.Errorf("%s /%d block %d = %s, want %s", tc.cidr, tc.blockBits, tc.i, got, tc.want)
		}
		if i, ok := sp.index(got); !ok || i != tc.i {
			t.Errorf("%s /%d index(%s) = %d %v, want %d", tc.cidr, tc.blockBits, got, i, ok, tc.i)
		}
	}
}

func TestSetSiteRefuses(t *testing.T) {
	a := New(Options{})
	if _, err := a.SetSite(Site{Name: "a", PodCIDRs: prefixes("10.0.0.0/16", "fd00::/48"), BlockBits4: 24, BlockBits6: 64}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		site Site
		want string
	}{
		{"overlap within", Site{Name: "b", PodCIDRs: prefixes("10.1.0.0/16", "10.1.128.0/17"), BlockBits4: 24}, "overlap"},
		{"overlap across", Site{Name: "b", PodCIDRs: prefixes("10.0.128.0/17"), BlockBits4: 24}, "of site a"},
		{"overlap across v6", Site{Name: "b", PodCIDRs: prefixes("fd00::/32"), BlockBits6: 48}, "of site a"},
		{"block wider than cidr", Site{Name: "b", PodCIDRs: prefixes("10.2.0.0/24"), BlockBits4: 16}, "does not fit"},
		{"no block size", Site{Name: "b", PodCIDRs: prefixes("fd02::/48")}, "does not fit"},
		{"host bits", Site{Name: "b", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.3.0.1/16")}, BlockBits4: 24}, "not a network address"},
	} {
		_, err := a.SetSite(tc.site)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want containing %q", tc.name, err, tc.want)
		}
		if _, err := a.Allocate("b", "n"); !errors.Is(err, ErrUnknownSite) {
			t.Errorf("%s: refused site was set: %v", tc.name, err)
		}
	}
	// Replacing a site with an overlapping version of itself is fine.
	if _, err := a.SetSite(Site{Name: "a", PodCIDRs: prefixes("10.0.0.0/15"), BlockBits4: 24}); err != nil {
		t.Fatal(err)
	}
}

func TestAllocate(t *testing.T) {
	a := New(Options{})
	mustSet(t, a, Site{Name: "dual", PodCIDRs: prefixes("fd00:1::/63", "10.0.0.0/23"), BlockBits4: 24, BlockBits6: 64})
	mustSet(t, a, Site{Name: "v4", PodCIDRs: prefixes("10.1.0.0/24", "10.1.1.0/24"), BlockBits4: 25})

	b1, err := a.Allocate("dual", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if want := "[fd00:1::/64 10.0.0.0/24]"; fmtList(b1) != want {
		t.Errorf("n1 = %s, want %s (IPv6 first, as the site lists it)", fmtList(b1), want)
	}
	again, err := a.Allocate("dual", "n1")
	if err != nil || again != b1 {
		t.Errorf("second Allocate = %v %v, want the same %v", again, err, b1)
	}
	if _, err := a.Allocate("dual", "n2"); err != nil {
		t.Fatal(err)
	}
	_, err = a.Allocate("dual", "n3")
	var ex *ExhaustedError
	if !errors.Is(err, ErrExhausted) || !errors.As(err, &ex) || ex.Site != "dual" {
		t.Fatalf("third node: %v, want exhausted", err)
	}
	if _, _, ok := a.Lookup("n3"); ok {
		t.Error("exhausted node holds something")
	}
	// Spans in order: 4 blocks of /25 over two /24s.
	var got []string
	for _, n := range []string{"a", "b", "c", "d"} {
		b, err := a.Allocate("v4", n)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmtList(b))
	}
	if want := "[10.1.0.0/25] [10.1.0.128/25] [10.1.1.0/25] [10.1.1.128/25]"; strings.Join(got, " ") != want {
		t.Errorf("v4 blocks %v, want %s", got, want)
	}
	if _, err := a.Allocate("v4", "n1"); !errors.As(err, new(*OtherSiteError)) {
		t.Errorf("node of another site: %v", err)
	}
	if _, err := a.Allocate("nope", "x"); !errors.Is(err, ErrUnknownSite) {
		t.Errorf("unknown site: %v", err)
	}
	if st := a.Stats("dual"); st.Nodes != 2 || st.V4 != (FamilyStats{Blocks: 2, Held: 2}) || st.V6 != (FamilyStats{Blocks: 2, Held: 2}) {
		t.Errorf("stats %+v", st)
	}
	checkInvariants(t, a)
}

func TestAllocateDualStackAllOrNothing(t *testing.T) {
	a := New(Options{})
	// Two IPv4 blocks, one IPv6 block.
	mustSet(t, a, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/23", "fd00::/64"), BlockBits4: 24, BlockBits6: 64})
	if _, err := a.Allocate("s", "n1"); err != nil {
		t.Fatal(err)
	}
	_, err := a.Allocate("s", "n2")
	var ex *ExhaustedError
	if !errors.As(err, &ex) || ex.Family != IPv6 {
		t.Fatalf("n2: %v, want IPv6 exhausted", err)
	}
	if st := a.Stats("s"); st.V4.Free != 1 || st.V4.Held != 1 {
		t.Errorf("IPv4 block taken by a failed dual-stack allocation: %+v", st)
	}
	checkInvariants(t, a)
}

func TestAdopt(t *testing.T) {
	site := Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/16", "fd00::/56"), BlockBits4: 24, BlockBits6: 64}
	v4only := Site{Name: "v4", PodCIDRs: prefixes("10.9.0.0/16"), BlockBits4: 24}
	for _, tc := range []struct {
		name    string
		site    string
		before  map[string][]string // node -> CIDRs adopted first
		cidrs   []string
		held    string
		reasons []Reason
		other   string
	}{
		{name: "both in pool", site: "s", cidrs: []string{"10.0.7.0/24", "fd00:0:0:9::/64"}, held: "[10.0.7.0/24 fd00:0:0:9::/64]"},
		{name: "out of pool", site: "s", cidrs: []string{"10.200.0.0/24"}, held: "[]", reasons: []Reason{OutOfPool}},
		{name: "wrong size", site: "s", cidrs: []string{"10.0.6.0/23"}, held: "[]", reasons: []Reason{NotBlock}},
		{name: "wider than pool", site: "s", cidrs: []string{"10.0.0.0/8"}, held: "[]", reasons: []Reason{NotBlock}},
		{name: "one good one out", site: "s", cidrs: []string{"10.0.1.0/24", "fd99::/64"}, held: "[10.0.1.0/24]", reasons: []Reason{OutOfPool}},
		{name: "beyond the first 2^20 blocks", site: "wide", cidrs: []string{"fd00:9:0:10::/80"}, held: "[]", reasons: []Reason{BeyondLimit}},
		{name: "within the first 2^20 blocks", site: "wide", cidrs: []string{"fd00:9:0:f:ffff::/80"}, held: "[fd00:9:0:f:ffff::/80]"},
		{name: "no family", site: "v4", cidrs: []string{"10.9.3.0/24", "fd00::/64"}, held: "[10.9.3.0/24]", reasons: []Reason{NoFamily}},
		{name: "second of family", site: "s", cidrs: []string{"10.0.1.0/24", "10.0.2.0/24"}, held: "[10.0.1.0/24]", reasons: []Reason{SecondOfFamily}},
		{name: "conflict", site: "s", before: map[string][]string{"other": {"10.0.5.0/24"}}, cidrs: []string{"10.0.5.0/24"}, held: "[]", reasons: []Reason{Conflict}, other: "other"},
		{name: "same again", site: "s", before: map[string][]string{"n": {"10.0.5.0/24"}}, cidrs: []string{"10.0.5.0/24"}, held: "[10.0.5.0/24]"},
		{name: "mismatch", site: "s", before: map[string][]string{"n": {"10.0.5.0/24"}}, cidrs: []string{"10.0.6.0/24"}, held: "[10.0.5.0/24]", reasons: []Reason{Mismatch}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Options{})
			mustSet(t, a, site)
			mustSet(t, a, v4only)
			mustSet(t, a, Site{Name: "wide", PodCIDRs: prefixes("fd00:9::/48"), BlockBits6: 80})
			for n, cs := range tc.before {
				if _, probs, err := a.Adopt(tc.site, n, prefixes(cs...)); err != nil || len(probs) > 0 {
					t.Fatal(err, probs)
				}
			}
			b, probs, err := a.Adopt(tc.site, "n", prefixes(tc.cidrs...))
			if err != nil {
				t.Fatal(err)
			}
			if fmtList(b) != tc.held {
				t.Errorf("held %s, want %s", fmtList(b), tc.held)
			}
			var reasons []Reason
			for _, p := range probs {
				reasons = append(reasons, p.Reason)
				if p.Reason == Conflict && p.Other != tc.other {
					t.Errorf("conflict names %q, want %q", p.Other, tc.other)
				}
			}
			if !reflect.DeepEqual(reasons, tc.reasons) {
				t.Errorf("problems %v, want reasons %v", probs, tc.reasons)
			}
			checkInvariants(t, a)
			// What a node adopted is never handed out again.
			for i := 0; i < 300; i++ {
				nb, err := a.Allocate(tc.site, "fill"+string(rune('a'+i%26))+string(rune('a'+i/26)))
				if err != nil {
					break
				}
				if b.V4.IsValid() && nb.V4 == b.V4 {
					t.Fatalf("adopted %s handed out again", b.V4)
				}
			}
			checkInvariants(t, a)
		})
	}
}

func TestReleaseGrace(t *testing.T) {
	clk := newClock()
	a := New(Options{Now: clk.Now, Grace: time.Minute})
	mustSet(t, a, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24"), BlockBits4: 25})
	b1, _ := a.Allocate("s", "n1")
	if _, err := a.Allocate("s", "n2"); err != nil {
		t.Fatal(err)
	}
	a.Release("n1")
	a.Release("never-held") // no-op
	if st := a.Stats("s"); st.V4 != (FamilyStats{Blocks: 2, Held: 1, Pending: 1}) || st.Nodes != 1 {
		t.Errorf("stats in grace %+v", st)
	}
	if _, err := a.Allocate("s", "n3"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("block in grace handed out: %v", err)
	}
	if at, ok := a.NextRelease(); !ok || !at.Equal(clk.Now().Add(time.Minute)) {
		t.Errorf("NextRelease %v %v", at, ok)
	}
	// Back within the grace: the same block.
	clk.Add(30 * time.Second)
	back, err := a.Allocate("s", "n1")
	if err != nil || back != b1 {
		t.Fatalf("n1 back within grace: %v %v, want %v", back, err, b1)
	}
	if _, ok := a.NextRelease(); ok {
		t.Error("revived holding still pending")
	}
	checkInvariants(t, a)
	a.Release("n1")
	clk.Add(time.Minute - time.Nanosecond)
	if _, err := a.Allocate("s", "n3"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("block handed out before the grace ended: %v", err)
	}
	clk.Add(time.Nanosecond)
	got, err := a.Allocate("s", "n3")
	if err != nil || got != b1 {
		t.Fatalf("after grace: %v %v, want %v", got, err, b1)
	}
	checkInvariants(t, a)

	// Grace 0 frees at once.
	z := New(Options{})
	mustSet(t, z, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24"), BlockBits4: 24})
	z.Allocate("s", "a")
	z.Release("a")
	if _, err := z.Allocate("s", "b"); err != nil {
		t.Fatal(err)
	}
}

func TestRebuild(t *testing.T) {
	clk := newClock()
	a := New(Options{Now: clk.Now, Grace: time.Minute})
	mustSet(t, a, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/22", "fd00::/62"), BlockBits4: 24, BlockBits6: 64})
	mustSet(t, a, Site{Name: "t", PodCIDRs: prefixes("10.1.0.0/22"), BlockBits4: 24})
	for _, n := range []string{"a", "b", "c"} {
		a.Allocate("s", n)
	}
	a.Allocate("t", "d")
	a.Release("b")
	before := a.Holdings()

	// Rebuild from the same holdings: the same state, and b's block stays in grace.
	if probs := a.Rebuild(before); len(probs) > 0 {
		t.Fatal(probs)
	}
	if after := a.Holdings(); !reflect.DeepEqual(after, before) {
		t.Fatalf("rebuild changed holdings:\n%v\n%v", holdingsString(before), holdingsString(after))
	}
	if st := a.Stats("s"); st.V4.Pending != 1 || st.V4.Held != 2 || st.Nodes != 2 {
		t.Errorf("stats after rebuild %+v", st)
	}
	checkInvariants(t, a)

	// Order decides a conflict; unknown sites are reported.
	probs := a.Rebuild([]Entry{
		{Node: "x", Site: "s", CIDRs: prefixes("10.0.2.0/24")},
		{Node: "y", Site: "s", CIDRs: prefixes("10.0.2.0/24", "fd00::/64")},
		{Node: "z", Site: "gone", CIDRs: prefixes("10.9.0.0/24")},
	})
	if len(probs) != 2 || probs[0].Reason != Conflict || probs[0].Other != "x" || probs[1].Reason != UnknownSite {
		t.Errorf("problems %v", probs)
	}
	if b, _, _ := a.Lookup("y"); fmtList(b) != "[fd00::/64]" {
		t.Errorf("y holds %v", b)
	}
	checkInvariants(t, a)
	// Nothing holds a rebuilt block twice: fill the pool.
	for i := 0; ; i++ {
		if _, err := a.Allocate("s", "fill"+string(rune('a'+i))); err != nil {
			break
		}
	}
	checkInvariants(t, a)
}

func TestSetSiteChange(t *testing.T) {
	a := New(Options{})
	mustSet(t, a, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/23"), BlockBits4: 24})
	a.Allocate("s", "a") // 10.0.0.0/24
	a.Allocate("s", "b") // 10.0.1.0/24
	ev, err := a.SetSite(Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24", "10.0.8.0/24"), BlockBits4: 24})
	if err != nil || !reflect.DeepEqual(ev, []string{"b"}) {
		t.Fatalf("stranded %v %v, want [b]", ev, err)
	}
	if b, _, _ := a.Lookup("a"); fmtList(b) != "[10.0.0.0/24]" {
		t.Errorf("a holds %v", b)
	}
	// b keeps its block, outside the pool, and gets no other.
	if b, err := a.Allocate("s", "b"); err != nil || fmtList(b) != "[10.0.1.0/24]" {
		t.Errorf("b again %v %v", b, err)
	}
	if got := a.OutOfPool("b"); fmt.Sprint(got) != "[10.0.1.0/24]" {
		t.Errorf("OutOfPool(b) = %v", got)
	}
	if got := a.OutOfPool("a"); len(got) != 0 {
		t.Errorf("OutOfPool(a) = %v", got)
	}
	// Another site may not take the block b still holds.
	if _, err := a.SetSite(Site{Name: "t", PodCIDRs: prefixes("10.0.1.0/24"), BlockBits4: 24}); err == nil || !strings.Contains(err.Error(), "still holds") {
		t.Errorf("site over b's stray block: %v", err)
	}
	checkInvariants(t, a)
	if ev := a.RemoveSite("s"); !reflect.DeepEqual(ev, []string{"a", "b"}) {
		t.Errorf("RemoveSite stranded %v", ev)
	}
	if _, err := a.Allocate("s", "c"); !errors.Is(err, ErrUnknownSite) {
		t.Errorf("Allocate in a removed site: %v", err)
	}
	// The removed site's pod CIDRs are still its nodes'.
	if _, err := a.SetSite(Site{Name: "t", PodCIDRs: prefixes("10.0.0.0/16"), BlockBits4: 24}); err == nil {
		t.Error("a site over a removed site's held pod CIDRs was accepted")
	}
	checkInvariants(t, a)
	// Its nodes go: the site is forgotten, its range free for others.
	a.Release("a")
	a.Release("b")
	if _, err := a.SetSite(Site{Name: "t", PodCIDRs: prefixes("10.0.0.0/16"), BlockBits4: 24}); err != nil {
		t.Errorf("the removed site outlived its nodes: %v", err)
	}
	checkInvariants(t, a)
}

func mustSet(t testing.TB, a *Allocator, s Site) {
	t.Helper()
	if _, err := a.SetSite(s); err != nil {
		t.Fatal(err)
	}
}

func fmtList(b Blocks) string {
	var ss []string
	for _, p := range b.List() {
		ss = append(ss, p.String())
	}
	return "[" + strings.Join(ss, " ") + "]"
}
