package catalog

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/bridgehead/bridgehead/config"
)

// joinNode is a node whose name sorts between node-00000 and the rest
// of site i of plan's sites: a join in the middle of the name order.
func joinNode(i, k int) config.Node {
	return config.Node{
		Name:     fmt.Sprintf("node-00000a%d.site-%03d.example", k, i),
		Address:  netip.AddrFrom4([4]byte{10, byte(i), 250, byte(k)}),
		PodCIDR:  netip.PrefixFrom(netip.AddrFrom4([4]byte{100, 127, byte(k), 0}), 24),
		Address6: netip.MustParseAddr(fmt.Sprintf("fd00:%x::f:%x", i, k)),
		PodCIDR6: netip.MustParsePrefix(fmt.Sprintf("fd10:%x:0:f:%x::/80", i, k)),
	}
}

// written is what a writer that compares with the last publication
// writes to go from before to after: the objects created or changed, and
// their data bytes (deletions are counted apart).
// lookup reads objs by name, for BucketCounts.
func lookup(objs []*corev1.ConfigMap) func(string) *corev1.ConfigMap {
	m := byName(objs)
	return func(name string) *corev1.ConfigMap { return m[name] }
}

// countSlices is the node slices among objs.
func countSlices(objs []*corev1.ConfigMap) int {
	sl, _, _ := WriteOrder(objs)
	return len(sl)
}

func written(before, after []*corev1.ConfigMap) (objs []string, bytes int, deleted int) {
	old := byName(before)
	for _, o := range after {
		if p := old[o.Name]; p == nil || !maps.Equal(p.Data, o.Data) || !maps.Equal(p.Labels, o.Labels) {
			objs = append(objs, o.Name)
			bytes += Size(o)
		}
	}
	now := byName(after)
	for _, o := range before {
		if now[o.Name] == nil {
			deleted++
		}
	}
	return objs, bytes, deleted
}

// TestJoinWritesOneSlice: at 1,000 nodes in one site, a node that joins
// in the middle of the name order changes exactly one slice and the
// site's index (whose list carries the slices' hashes). When slices were
// cut by position in name order, the join shifted every later node and
// rewrote every later slice.
func TestJoinWritesOneSlice(t *testing.T) {
	sites := plan(1, 1000)
	before, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	prev := BucketCounts(before[0], lookup(before))
	for k := range 20 {
		sites[0].Nodes = append(sites[0].Nodes, joinNode(0, k))
		after, err := Render(sites, PreviousBuckets(prev))
		if err != nil {
			t.Fatal(err)
		}
		objs, bytes, deleted := written(before, after)
		var slicesWritten []string
		for _, o := range objs {
			if o != IndexName("site-000") {
				slicesWritten = append(slicesWritten, o)
			}
		}
		if len(slicesWritten) != 1 || slicesWritten[0] == BaseName || !slices.Contains(objs, IndexName("site-000")) || deleted != 0 {
			t.Fatalf("join %d (%d slices): wrote %v (%d bytes), deleted %d; want the index and exactly one slice", k, countSlices(after), objs, bytes, deleted)
		}
		if k == 0 {
			t.Logf("join at 1,000 nodes: %d slices; wrote %v, %d bytes", countSlices(after), objs, bytes)
		}
		before, prev = after, BucketCounts(after[0], lookup(after))
	}
	roundTrip(t, sites, 0)
}

// TestBucketCounts: a site's slice count follows its size with a wide
// band in between, so a site whose size goes back and forth across one
// number does not rewrite all its slices at each step; every slice stays
// at most MaxNodesPerSlice.
func TestBucketCounts(t *testing.T) {
	for _, tc := range []struct {
		n, prev, want int
	}{
		{0, 0, 0}, {1, 0, 1}, {250, 0, 1}, {251, 0, 2}, {1000, 0, 4}, {1001, 0, 8}, {10000, 0, 64},
		{400, 1, 1}, {401, 1, 2}, // grows past an average of 400
		{251, 2, 2}, {250, 2, 2}, {200, 2, 2}, {199, 2, 1}, // shrinks under 100
		{1600, 4, 4}, {1601, 4, 8}, {800, 8, 8}, {799, 8, 4}, {400, 4, 4}, {399, 4, 2},
		{5, 64, 1}, {300, 3, 2}, // a count that is not a power of two is not kept
	} {
		if got := bucketCount(tc.n, tc.prev); got != tc.want {
			t.Errorf("bucketCount(%d nodes, %d before) = %d, want %d", tc.n, tc.prev, got, tc.want)
		}
	}
	// Up and down across a boundary: the count moves once each way.
	sites := plan(1, 1000)
	objs, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	counts := []int{countSlices(objs)}
	for _, n := range []int{1001, 1000, 1001, 1000, 1601, 1599, 1601, 799, 801, 799} {
		for len(sites[0].Nodes) < n {
			sites[0].Nodes = append(sites[0].Nodes, joinNode(0, len(sites[0].Nodes)))
		}
		sites[0].Nodes = sites[0].Nodes[:n]
		if objs, err = Render(sites, PreviousBuckets(BucketCounts(objs[0], lookup(objs)))); err != nil {
			t.Fatal(err)
		}
		counts = append(counts, countSlices(objs))
		for _, o := range objs[1:] {
			if nodes, _ := DecodeNodes([]byte(o.Data[NodesKey])); len(nodes) > MaxNodesPerSlice {
				t.Fatalf("%s: %d nodes", o.Name, len(nodes))
			}
		}
	}
	if want := []int{4, 4, 4, 4, 4, 8, 8, 8, 4, 4, 4}; !slices.Equal(counts, want) {
		t.Errorf("slice counts %v, want %v", counts, want)
	}
}

// watcherBytes is the data bytes the API server sends to watchers when
// the objects named in objs are written: the base goes to every watcher
// of the catalog (one node agent per node, every gateway, the
// controller), a site's slices and index to its site's agents and
// gateways and the controller (kube/follow watches the base by name and
// its own site's objects by label).
func watcherBytes(sites []config.Site, after []*corev1.ConfigMap, objs []string) int {
	all, per := 1, map[string]int{}
	for _, s := range sites {
		per[s.Name] = len(s.Nodes) + len(s.Gateways) + 1
		all += len(s.Nodes) + len(s.Gateways)
	}
	m := byName(after)
	n := 0
	for _, name := range objs {
		o := m[name]
		if o.Labels[CatalogLabel] == KindSites {
			n += Size(o) * all
		} else {
			n += Size(o) * per[o.Labels[SiteLabel]]
		}
	}
	return n
}

// TestJoinLeavesBase: at 10,000 nodes over 200 sites, a join writes one
// slice and the index of its own site, never the base, so the bytes sent
// to watchers grow with the site, not the cluster. When the base was the
// commit point (it listed every slice's hash), every join rewrote it, and
// every agent and gateway of the cluster received it: 1.36 GB a join.
func TestJoinLeavesBase(t *testing.T) {
	sites := plan(200, 10000)
	before, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	for k := range 10 {
		i := k * 17 % 200
		sites[i].Nodes = append(sites[i].Nodes, joinNode(i, k))
		after, err := Render(sites, PreviousBuckets(BucketCounts(before[0], lookup(before))))
		if err != nil {
			t.Fatal(err)
		}
		objs, bytes, deleted := written(before, after)
		site := sites[i].Name
		if want := []string{SliceName(site, 0), IndexName(site)}; !slices.Equal(objs, want) || deleted != 0 {
			t.Fatalf("join %d in %s: wrote %v, deleted %d; want %v", k, site, objs, deleted, want)
		}
		if w := watcherBytes(sites, after, objs); w > 1<<20 {
			t.Fatalf("join %d in %s: %d bytes to watchers, over 1 MiB", k, site, w)
		} else if k == 0 {
			t.Logf("join in %s: wrote %v, %d bytes; %d bytes to watchers", site, objs, bytes, w)
		}
		if _, err := Assemble(after[0], byName(after), site); err != nil {
			t.Fatal(err)
		}
		before = after
	}
}

// BenchmarkJoin: one node joins a catalog of 10,000 nodes (200 sites of
// 50, and one site): the objects a writer that compares with its last
// publication writes, their bytes, and what the API server sends to
// their watchers (watcherBytes).
func BenchmarkJoin(b *testing.B) {
	for _, tc := range []struct {
		name         string
		sites, nodes int
	}{{"200sites-10000nodes", 200, 10000}, {"1site-10000nodes", 1, 10000}} {
		b.Run(tc.name, func(b *testing.B) {
			sites := plan(tc.sites, tc.nodes)
			before, err := Render(sites)
			if err != nil {
				b.Fatal(err)
			}
			prev := BucketCounts(before[0], lookup(before))
			sites[0].Nodes = append(sites[0].Nodes, joinNode(0, 0))
			var after []*corev1.ConfigMap
			for b.Loop() {
				if after, err = Render(sites, PreviousBuckets(prev)); err != nil {
					b.Fatal(err)
				}
			}
			objs, bytes, deleted := written(before, after)
			b.ReportMetric(float64(len(objs)), "objects-written")
			b.ReportMetric(float64(bytes), "bytes-written")
			b.ReportMetric(float64(watcherBytes(sites, after, objs)), "bytes-to-watchers")
			b.ReportMetric(float64(deleted), "objects-deleted")
			b.ReportMetric(float64(countSlices(after)), "slices")
		})
	}
}
