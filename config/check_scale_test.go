package config

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"testing"

	"github.com/bridgehead/bridgehead/bench/catalog"
)

// writeCatalog writes a generated catalog with its local key and returns
// the config path.
func writeCatalog(tb testing.TB, o catalog.Options) string {
	tb.Helper()
	c, err := catalog.New(o)
	if err != nil {
		tb.Fatal(err)
	}
	path, err := c.Write(tb.TempDir(), "bridgehead.yaml", catalog.Local{})
	if err != nil {
		tb.Fatal(err)
	}
	return path
}

// TestCheckCatalog: a generated catalog (with nodes) is clean, so the
// scale benchmarks measure the success path.
func TestCheckCatalog(t *testing.T) {
	path := writeCatalog(t, catalog.Options{Sites: 20, Gateways: 3, Prefixes: 2000, Nodes: 20})
	c, problems, warnings, err := CheckFile(path, CheckOptions{})
	if err != nil || len(problems) > 0 || len(warnings) > 0 {
		t.Fatalf("err %v\nproblems:\n%v\nwarnings:\n%v", err, problems, warnings)
	}
	if n := len(c.Sites); n != 20 {
		t.Errorf("%d sites, want 20", n)
	}
}

// TestCheckOpsGrowth catches a rule of Check going quadratic without
// timing anything: every rule counts its primitive steps (comparisons,
// index probes), and going from n to 8n prefixes must multiply them by
// about 8·log(8n)/log(n) (~10), where a quadratic rule gives 64. Nodes
// grow with the prefixes too, so the per-node rules are covered.
func TestCheckOpsGrowth(t *testing.T) {
	ops := func(prefixes, nodes int) int {
		path := writeCatalog(t, catalog.Options{Sites: 25, Gateways: 3, Prefixes: prefixes, Nodes: nodes})
		c, err := Load(path)
		if err != nil {
			t.Fatal(err)
		}
		problems, warnings, n := check(c, CheckOptions{SkipPrivateKey: true})
		if len(problems)+len(warnings) > 0 {
			t.Fatalf("problems %v warnings %v", problems, warnings)
		}
		return n
	}
	small, large := ops(2_000, 20), ops(16_000, 160)
	ratio := float64(large) / float64(small)
	t.Logf("ops: %d at 2k prefixes, %d at 16k: x%.1f", small, large, ratio)
	if ratio > 16 {
		t.Errorf("8x the prefixes took x%.1f the steps (%d -> %d): a check grows faster than n log n", ratio, small, large)
	}
	if small < 2_000 {
		t.Errorf("only %d steps counted for 2k prefixes: the rules do not count their work", small)
	}
}

// TestSweepOverlaps compares the sort-and-sweep with the pairwise
// definition on random nested and overlapping prefixes of both families.
func TestSweepOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for round := range 200 {
		var items []cidr
		for i := range 1 + rng.IntN(40) {
			var p netip.Prefix
			if rng.IntN(4) == 0 {
				a := netip.AddrFrom16([16]byte{0xfd, 0, byte(rng.IntN(4)), byte(rng.IntN(256))})
				p = netip.PrefixFrom(a, 16+rng.IntN(24))
			} else {
				a := netip.AddrFrom4([4]byte{10, byte(rng.IntN(4)), byte(rng.IntN(256)), 0})
				p = netip.PrefixFrom(a, 12+rng.IntN(14))
			}
			items = append(items, cidr{fmt.Sprintf("p[%d]", i), p, 0})
		}
		// The definition: the first listings of every two different
		// overlapping prefixes, and every repeated listing with the first.
		first := func(i int) bool {
			return slices.IndexFunc(items, func(x cidr) bool { return x.p.Masked() == items[i].p.Masked() }) == i
		}
		var want []string
		for j, b := range items {
			for i, a := range items[:j] {
				same := a.p.Masked() == b.p.Masked()
				if first(i) && (same || first(j) && a.p.Masked().Overlaps(b.p.Masked())) {
					want = append(want, a.path+" "+b.path)
				}
			}
		}
		var got []string
		sweepOverlaps(items, &reporter{}, func(a, b cidr) { got = append(got, a.path+" "+b.path) })
		slices.Sort(want)
		slices.Sort(got)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d: %v\ngot  %v\nwant %v", round, items, got, want)
		}
	}
}

// TestCheckMappedPrefixes: IPv4-mapped IPv6 prefixes are refused
// wherever a prefix is listed (issue #13, item 5): the data path would
// treat ::ffff:10.1.0.0/112 as 10.1.0.0/16, another site's range.
func TestCheckMappedPrefixes(t *testing.T) {
	tests := []struct {
		name string
		repl map[int]string
		want []want
	}{
		{"pod CIDR over another site's pod CIDR", map[int]string{49: "      - ::ffff:10.244.0.0/112"},
			[]want{{49, "sites[1].podCIDRs[1]", "::ffff:10.244.0.0/112 is an IPv4-mapped IPv6 prefix; write the IPv4 prefix 10.244.0.0/16 instead"}}},
		{"service CIDR", map[int]string{13: "    - ::ffff:10.96.0.0/112"},
			[]want{
				{13, "cluster.serviceCIDRs[0]", "IPv4-mapped IPv6 prefix; write the IPv4 prefix 10.96.0.0/16"},
				{14, "cluster.dnsServiceIP", "is not inside cluster.serviceCIDRs"},
			}},
		{"shorter than the mapped range", map[int]string{49: "      - ::ffff:0:0/95"},
			[]want{
				{49, "sites[1].podCIDRs[1]", "has host bits set"},
				{49, "sites[1].podCIDRs[1]", "IPv4-mapped IPv6 prefix (::ffff:0:0/96 is not routable)"},
			}},
		{"node pod CIDR", map[int]string{40: "        podCIDR: ::ffff:10.244.1.0/120"},
			[]want{
				{40, "sites[0].nodes[0].podCIDR", "IPv4-mapped IPv6 prefix; write the IPv4 prefix 10.244.1.0/24"},
				{40, "sites[0].nodes[0].podCIDR", "is not inside the podCIDRs"},
			}},
		{"plain IPv6 is fine", map[int]string{49: "      - fd00:b:2::/56"}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems, _ := Check(mustParse(t, tc.repl), CheckOptions{SkipPrivateKey: true})
			matchErrors(t, problems, tc.want)
		})
	}
}

// TestCheckNextHopFamilies: check warns, with file and line, about every
// site for which `bridgehead routes` would fail for want of a next hop of
// a destination's family (issue #13, item 6); noderoutes' test of the
// TestNextHopWarningMatchesRoutes keeps the two in step.
func TestCheckNextHopFamilies(t *testing.T) {
	tests := []struct {
		name string
		repl map[int]string
		want []want
	}{
		{"fixture: every site has both", nil, nil},
		{"site b without an IPv6 next hop", map[int]string{46: ""},
			[]want{{44, "sites[1]", `site "b" has no IPv6 next hop (routerAddress6/address6) for its nodes' routes to IPv6 CIDRs such as sites[0].nodeCIDRs[1] fd00:a::/64 (line 23) of site "a"`}}},
		{"site a without an IPv6 next hop", map[int]string{34: "        address: 10.0.0.11"},
			[]want{{20, "sites[0]", `site "a" has no IPv6 next hop (routerAddress6/address6) for its nodes' routes to IPv6 CIDRs such as sites[1].nodeCIDRs[1] fd00:b::/64 (line 45) of site "b"`}}},
		{"IPv4-only site b is fine when no other site has IPv6", map[int]string{23: "", 34: "        address: 10.0.0.11", 45: "    nodeCIDRs: [10.1.0.0/16]", 46: "", 49: ""}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, warnings := Check(mustParse(t, tc.repl), CheckOptions{SkipPrivateKey: true})
			matchErrors(t, warnings, tc.want)
		})
	}
}

// BenchmarkCheck measures Load and Check of generated catalogs of 200
// sites x 3 gateways at 1k, 10k and 100k prefixes: the figures of issue
// #14 ("under 2 s each" at 100k). A check that goes quadratic shows as a
// jump of 100x per 10x here.
func BenchmarkCheck(b *testing.B) {
	for _, n := range []int{1_000, 10_000, 100_000} {
		path := writeCatalog(b, catalog.Options{Prefixes: n})
		data, err := os.ReadFile(path)
		if err != nil {
			b.Fatal(err)
		}
		opts := CheckOptions{}
		b.Run(fmt.Sprintf("load/prefixes=%d", n), func(b *testing.B) {
			b.SetBytes(int64(len(data)))
			for b.Loop() {
				if _, err := Parse(path, data); err != nil {
					b.Fatal(err)
				}
			}
		})
		c, err := Parse(path, data)
		if err != nil {
			b.Fatal(err)
		}
		b.Run(fmt.Sprintf("check/prefixes=%d", n), func(b *testing.B) {
			for b.Loop() {
				if p, _ := Check(c, opts); len(p) > 0 {
					b.Fatal(p)
				}
			}
		})
		b.Run(fmt.Sprintf("checkfile/prefixes=%d", n), func(b *testing.B) {
			for b.Loop() {
				if _, p, _, err := CheckFile(path, opts); err != nil || len(p) > 0 {
					b.Fatal(err, p)
				}
			}
		})
	}
}
