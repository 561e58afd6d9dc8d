package ipam

import (
	"fmt"
	"net/netip"
	"runtime"
	"testing"
)

// benchScale is the scale: 10,000 nodes over 200 sites, dual-stack,
// each site a /16 in /24 blocks and a /56 in /64 blocks (256 blocks each).
const (
	benchSites = 200
	benchNodes = 10_000
)

func benchAllocator(b *testing.B) (*Allocator, []string, []string) {
	a := New(Options{})
	sites := make([]string, benchSites)
	for s := range sites {
		sites[s] = fmt.Sprintf("site-%03d", s)
		v6 := netip.PrefixFrom(netip.AddrFrom16([16]byte{0xfd, 0, byte(s >> 8), byte(s)}), 56)
		mustSet(b, a, Site{Name: sites[s], PodCIDRs: []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(s), 0, 0}), 16), v6}, BlockBits4: 24, BlockBits6: 64})
	}
	nodes := make([]string, benchNodes)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%05d", i)
	}
	return a, sites, nodes
}

// BenchmarkAllocateAll allocates a dual-stack block for each of 10,000
// nodes over 200 sites; one op is the whole 10,000.
func BenchmarkAllocateAll(b *testing.B) {
	_, sites, nodes := benchAllocator(b)
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		a, _, _ := benchAllocator(b)
		b.StartTimer()
		for i, n := range nodes {
			if _, err := a.Allocate(sites[i%benchSites], n); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchNodes), "ns/node")
}

// BenchmarkRebuild rebuilds the state of 10,000 nodes from their entries
// (what a new leader does after its informers sync).
func BenchmarkRebuild(b *testing.B) {
	a, sites, nodes := benchAllocator(b)
	for i, n := range nodes {
		a.Allocate(sites[i%benchSites], n)
	}
	entries := a.Holdings()
	b.ReportAllocs()
	for b.Loop() {
		if probs := a.Rebuild(entries); len(probs) > 0 {
			b.Fatal(probs[0])
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*benchNodes), "ns/node")
}

// BenchmarkBytesPerNode reports the heap the allocator holds per node
// (live heap after allocating all 10,000, minus the empty allocator's,
// over 10,000).
func BenchmarkBytesPerNode(b *testing.B) {
	var perNode float64
	for b.Loop() {
		b.StopTimer()
		a, sites, nodes := benchAllocator(b)
		var m0, m1 runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m0)
		b.StartTimer()
		for i, n := range nodes {
			a.Allocate(sites[i%benchSites], n)
		}
		b.StopTimer()
		runtime.GC()
		runtime.ReadMemStats(&m1)
		perNode = float64(m1.HeapAlloc-m0.HeapAlloc) / benchNodes
		runtime.KeepAlive(a)
		runtime.KeepAlive(nodes)
		b.StartTimer()
	}
	b.ReportMetric(perNode, "B/node")
}

// BenchmarkAllocateOne allocates into a nearly full 2^20-block span, the
// worst case of the bitmap search (the cursor wraps over full words).
func BenchmarkAllocateOne(b *testing.B) {
	a := New(Options{})
	mustSet(b, a, Site{Name: "big", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("fd00::/44")}, BlockBits6: 64})
	for i := 0; i < 1<<20-1; i++ {
		if _, err := a.Allocate("big", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := a.Allocate("big", "last"); err != nil {
			b.Fatal(err)
		}
		a.Release("last")
	}
}
