package catalog

import (
	"errors"
	"fmt"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// plan generates sites with nodes dual-stack nodes spread evenly over
// them: site i has node CIDRs 10.<i/256>.<i%256>.0/... no: the plan only
// needs distinct, parseable values, so site i gets 10.x.0.0/16 and
// fd00:i::/64 nodes, and node k of the whole plan the k-th /24 of
// 100.64.0.0/10 and the k-th /80 of fd10::/48.
func plan(nSites, nNodes int) []config.Site {
	sites := make([]config.Site, nSites)
	for i := range sites {
		sites[i] = config.Site{
			Name:          fmt.Sprintf("site-%03d", i),
			NodeCIDRs:     []netip.Prefix{netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i), 0, 0}), 16), netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/64", i))},
			PodCIDRs:      []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("100.%d.0.0/16", 64+i%64)), netip.MustParsePrefix(fmt.Sprintf("fd10:%x::/64", i))},
			ProbeInterval: 300 * time.Millisecond,
			Keepalive:     5 * time.Second,
			Gateways: []config.Gateway{
				{Name: "gw1", Address: netip.AddrFrom4([4]byte{10, byte(i), 0, 1}), Endpoint: fmt.Sprintf("198.18.%d.%d:51820", i/256, i%256+1), PublicKey: "6Tu8zB0KFnP1vXXK5C8ahHpmeiCLMM5JQ0l32OchwXY="},
				{Name: "gw2", Address: netip.AddrFrom4([4]byte{10, byte(i), 0, 2}), Address6: netip.MustParseAddr(fmt.Sprintf("fd00:%x::2", i)), Endpoint: "gw2.example.net:51820", PublicKey: "Vd1pqIc8mzlTfnBeqUaPDv5/A+oXwb0lL3ZtF4JT1lg="},
			},
		}
	}
	for k := 0; k < nNodes; k++ {
		i := k % nSites
		sites[i].Nodes = append(sites[i].Nodes, config.Node{
			Name:     fmt.Sprintf("node-%05d.%s.example", k, sites[i].Name),
			Address:  netip.AddrFrom4([4]byte{10, byte(i), byte(k >> 8), byte(k)}),
			PodCIDR:  netip.PrefixFrom(netip.AddrFrom4([4]byte{100, byte(64 + k>>16), byte(k >> 8), 0}), 24),
			Address6: netip.MustParseAddr(fmt.Sprintf("fd00:%x::%x", i, k+10)),
			PodCIDR6: netip.MustParsePrefix(fmt.Sprintf("fd10:%x:0:0:%x::/80", i, k)),
		})
	}
	return sites
}

func byName(objs []*corev1.ConfigMap) map[string]*corev1.ConfigMap {
	m := map[string]*corev1.ConfigMap{}
	for _, o := range objs {
		m[o.Name] = o
	}
	return m
}

// sortedNodes is s with its nodes in name order, as a slice holds them.
func sortedNodes(s config.Site) config.Site {
	s.Nodes = slices.Clone(s.Nodes)
	slices.SortStableFunc(s.Nodes, func(a, b config.Node) int { return strings.Compare(a.Name, b.Name) })
	if len(s.Nodes) == 0 {
		s.Nodes = nil
	}
	return s
}

// roundTrip renders sites and checks that Assemble gives every site back,
// with exactly its own nodes for the site asked for (for every site, or
// at most sample of them spread over the list when sample > 0).
func roundTrip(t *testing.T, sites []config.Site, sample int) []*corev1.ConfigMap {
	t.Helper()
	objs, err := Render(sites, Namespace("bh"))
	if err != nil {
		t.Fatal(err)
	}
	if objs[0].Name != BaseName || objs[0].Namespace != "bh" || objs[0].Labels[CatalogLabel] != KindSites {
		t.Fatalf("first object %s/%s %v, want the base", objs[0].Namespace, objs[0].Name, objs[0].Labels)
	}
	m := byName(objs)
	step := 1
	if sample > 0 && len(sites) > sample {
		step = len(sites) / sample
	}
	for j := 0; j < len(sites); j += step {
		s := sites[j]
		got, err := Assemble(objs[0], m, s.Name)
		if err != nil {
			t.Fatalf("site %s: %v", s.Name, err)
		}
		want := make([]config.Site, len(sites))
		for i := range sites {
			want[i] = sites[i]
			want[i].Nodes = nil
		}
		for i := range want {
			if want[i].Name == s.Name {
				want[i] = sortedNodes(s)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("site %s: assembled\n%+v\nwant\n%+v", s.Name, got, want)
		}
	}
	return objs
}

func TestRoundTrip(t *testing.T) {
	v4only := plan(2, 7)
	for i := range v4only {
		v4only[i].NodeCIDRs, v4only[i].PodCIDRs = v4only[i].NodeCIDRs[:1], v4only[i].PodCIDRs[:1]
		for j := range v4only[i].Nodes {
			v4only[i].Nodes[j].Address6, v4only[i].Nodes[j].PodCIDR6 = netip.Addr{}, netip.Prefix{}
		}
	}
	yamlish := plan(1, 4) // names YAML would read as other types unquoted
	for i, name := range []string{"true", "null", "123", "1e3"} {
		yamlish[0].Nodes[i].Name = name
	}
	reversed := plan(3, 1200)
	for i := range reversed {
		slices.Reverse(reversed[i].Nodes)
	}
	for _, tc := range []struct {
		name   string
		sites  []config.Site
		slices int
	}{
		{"no sites", nil, 0},
		{"sites without nodes", plan(3, 0), 0},
		{"one node", plan(1, 1), 1},
		{"single stack", v4only, 2},
		{"names that are not strings in plain YAML", yamlish, 1},
		{"a slice's worth: two buckets", plan(1, MaxNodesPerSlice), 2},
		{"one more: four", plan(1, MaxNodesPerSlice+1), 4},
		{"unsorted input", reversed, 6},
		{"uneven", plan(7, 2345), 14},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := roundTrip(t, tc.sites, 0)
			sl, ix, base := WriteOrder(objs)
			if len(sl) != tc.slices || len(ix) != len(tc.sites) || len(base) != 1 || len(objs) != len(sl)+len(ix)+1 {
				t.Fatalf("%d slices, %d indexes, %d bases, want %d, %d, 1", len(sl), len(ix), len(base), tc.slices, len(tc.sites))
			}
			for _, o := range sl {
				n, err := DecodeNodes([]byte(o.Data[NodesKey]))
				if err != nil {
					t.Fatal(err)
				}
				if len(n) > MaxNodesPerSlice || !strings.HasPrefix(o.Name, BaseName+"-"+o.Labels[SiteLabel]+"-") {
					t.Fatalf("slice %s: %d nodes, labels %v", o.Name, len(n), o.Labels)
				}
			}
			for _, o := range ix {
				if o.Name != IndexName(o.Labels[SiteLabel]) {
					t.Fatalf("index %s of site %q", o.Name, o.Labels[SiteLabel])
				}
			}
		})
	}
}

// TestDeterministic: the same sites in any node order render to the same
// bytes, and a changed node changes only its own slice and its site's
// index, never the base.
func TestDeterministic(t *testing.T) {
	a, err := Render(plan(3, 1600))
	if err != nil {
		t.Fatal(err)
	}
	sites := plan(3, 1600)
	for i := range sites {
		slices.Reverse(sites[i].Nodes)
	}
	b, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("same sites rendered differently")
	}
	sites[1].Nodes[0].PodCIDR = netip.MustParsePrefix("100.127.255.0/24") // node-01597 of site-001 (533 nodes: 4 slices)
	c, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	var changed []string
	for i := range a {
		if !reflect.DeepEqual(a[i], c[i]) {
			changed = append(changed, a[i].Name)
		}
	}
	if want := []string{SliceName("site-001", bucketOf(sites[1].Nodes[0].Name, 4)), IndexName("site-001")}; !slices.Equal(changed, want) {
		t.Fatalf("changed %v, want %v", changed, want)
	}
}

func TestRenderRefuses(t *testing.T) {
	long := strings.Repeat("a", 64)
	for _, tc := range []struct {
		name  string
		sites []config.Site
		want  string
	}{
		{"empty name", []config.Site{{}}, `sites[0]: site name ""`},
		{"twice", []config.Site{{Name: "a"}, {Name: "b"}, {Name: "a"}}, `sites[2]: site "a" listed twice`},
		{"not a label", []config.Site{{Name: long}}, "not a valid label value"},
		{"not a name", []config.Site{{Name: "A_b"}}, "invalid ConfigMap name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Render(tc.sites)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
	// A base over the bound: a site with thousands of long endpoints.
	sites := plan(1, 0)
	gw := sites[0].Gateways[0]
	gw.Endpoint = strings.Repeat("e", 1000) + ":51820"
	for len(sites[0].Gateways) < 1100 {
		sites[0].Gateways = append(sites[0].Gateways, gw)
	}
	if _, err := Render(sites); err == nil || !strings.Contains(err.Error(), "over the 1048576-byte bound") {
		t.Fatalf("got %v, want the size bound", err)
	}
}

// TestAssembleIncomplete: a reader that sees objects of two publications
// that do not fit together refuses them with ErrIncomplete: an index with
// slices of another publication, an index written for another entry of
// its site than the base holds, a missing index or slice.
func TestAssembleIncomplete(t *testing.T) {
	old, err := Render(plan(2, 1200))
	if err != nil {
		t.Fatal(err)
	}
	sites := plan(2, 1200)
	sites[0].Nodes = sites[0].Nodes[:400] // site-000 shrinks to one slice
	sites[0].Keepalive = 7 * time.Second  // and its entry changes
	cur, err := Render(sites)
	if err != nil {
		t.Fatal(err)
	}
	with := func(objs []*corev1.ConfigMap, names ...string) map[string]*corev1.ConfigMap {
		m := byName(objs)
		for _, n := range names {
			m[n] = byName(cur)[n]
		}
		return m
	}
	without := func(objs []*corev1.ConfigMap, name string) map[string]*corev1.ConfigMap {
		m := byName(objs)
		delete(m, name)
		return m
	}
	for _, tc := range []struct {
		name   string
		base   *corev1.ConfigMap
		slices map[string]*corev1.ConfigMap
		site   string
		want   error
		msg    string
	}{
		{"no base", nil, byName(cur), "site-000", ErrIncomplete, "no ConfigMap bridgehead-catalog"},
		{"new base, old index", cur[0], byName(old), "site-000", ErrIncomplete, "index bridgehead-catalog-site-000-index was written for the site's entry"},
		{"old base, new index", old[0], with(old, IndexName("site-000")), "site-000", ErrIncomplete, "was written for the site's entry"},
		{"new index, old slices", cur[0], with(old, IndexName("site-000")), "site-000", ErrIncomplete, "slice bridgehead-catalog-site-000-0 has hash"},
		{"index missing", cur[0], without(cur, IndexName("site-001")), "site-001", ErrIncomplete, "index bridgehead-catalog-site-001-index is missing"},
		{"slice missing", old[0], without(old, SliceName("site-001", 0)), "site-001", ErrIncomplete, "slice bridgehead-catalog-site-001-0 is missing"},
		{"unknown site", cur[0], byName(cur), "site-009", ErrUnknownSite, `"site-009"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Assemble(tc.base, tc.slices, tc.site)
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want %v with %q", err, tc.want, tc.msg)
			}
		})
	}
	// Stale slices beside a complete publication are ignored.
	all := byName(cur)
	for _, o := range old {
		if _, ok := all[o.Name]; !ok {
			all[o.Name] = o
		}
	}
	got, err := Assemble(cur[0], all, "site-000")
	if err != nil || len(got[0].Nodes) != 400 {
		t.Fatalf("with stale slices: %d nodes, %v", len(got[0].Nodes), err)
	}
	// A site whose entry did not change reads its index and slices of
	// any publication with any base: the other site's objects are not
	// the site's commit point.
	if got, err := Assemble(cur[0], byName(old), "site-001"); err != nil || len(got[1].Nodes) != 600 {
		t.Fatalf("site-001, new base, old objects: %d nodes, %v", len(got[1].Nodes), err)
	}
}

// TestLegacyBase: a base of the format before indexes (the slice lists in
// the base) still assembles, so readers can be upgraded before the
// controller; its slice lists are its commit point.
func TestLegacyBase(t *testing.T) {
	objs, err := Render(plan(2, 700))
	if err != nil {
		t.Fatal(err)
	}
	legacy := objs[0].DeepCopy()
	delete(legacy.Data, SiteHashesKey)
	lists := map[string][]SliceRef{}
	m := map[string]*corev1.ConfigMap{}
	for _, o := range objs[1:] {
		if o.Labels[CatalogLabel] == KindIndex {
			idx, err := DecodeIndex(o)
			if err != nil {
				t.Fatal(err)
			}
			lists[o.Labels[SiteLabel]] = idx.Slices
			continue
		}
		m[o.Name] = o
	}
	data, err := yaml.Marshal(lists)
	if err != nil {
		t.Fatal(err)
	}
	legacy.Data[SlicesKey] = string(data)
	got, err := Assemble(legacy, m, "site-001")
	if err != nil || len(got[1].Nodes) != 350 {
		t.Fatalf("legacy base: %d nodes, %v", len(got[1].Nodes), err)
	}
	if counts := BucketCounts(legacy, func(n string) *corev1.ConfigMap { return m[n] }); counts["site-000"] != 2 || counts["site-001"] != 2 {
		t.Fatalf("legacy bucket counts %v", counts)
	}
	m[SliceName("site-001", 1)] = m[SliceName("site-000", 1)]
	if _, err := Assemble(legacy, m, "site-001"); !errors.Is(err, ErrIncomplete) {
		t.Fatalf("legacy base, wrong slice: %v", err)
	}
}

func TestDecodeBaseRefuses(t *testing.T) {
	objs, err := Render(plan(2, 3))
	if err != nil {
		t.Fatal(err)
	}
	good := objs[0].Data
	for _, tc := range []struct {
		name string
		edit func(d map[string]string)
		want string
	}{
		{"no sites", func(d map[string]string) { delete(d, SitesKey) }, "sites.yaml: missing"},
		{"unknown field", func(d map[string]string) {
			d[SitesKey] = strings.Replace(d[SitesKey], "probeInterval", "probeIntervall", 1)
		}, "field probeIntervall not found"},
		{"nodes in base", func(d map[string]string) {
			d[SitesKey] = strings.Replace(d[SitesKey], "gateways:", "nodes: [{name: x}]\n    gateways:", 1)
		}, "lists nodes"},
		{"no site hashes", func(d map[string]string) { delete(d, SiteHashesKey) }, "sitehashes.yaml: missing"},
		{"site without hash", func(d map[string]string) {
			d[SiteHashesKey] = strings.Split(d[SiteHashesKey], "\n")[0] + "\n"
		}, `no entry for site "site-001"`},
		{"hash of no site", func(d map[string]string) { d[SiteHashesKey] += "site-x: " + strings.Repeat("0", 64) + "\n" }, `an entry for site "site-x"`},
		{"short hash", func(d map[string]string) { d[SiteHashesKey] = strings.Replace(d[SiteHashesKey], ": ", ": 0", 1) }, "64-digit hash"},
		{"two documents", func(d map[string]string) { d[SiteHashesKey] += "---\n{}\n" }, "more than one YAML document"},
		{"bad prefix", func(d map[string]string) { d[SitesKey] = strings.Replace(d[SitesKey], "10.0.0.0/16", "10.0.0.0/33", 1) }, "10.0.0.0/33"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			base := objs[0].DeepCopy()
			tc.edit(base.Data)
			if reflect.DeepEqual(base.Data, good) {
				t.Fatal("edit changed nothing")
			}
			_, err := Assemble(base, byName(objs), "site-000")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("got %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRelays(t *testing.T) {
	rl := &v1.RelaySpec{Port: 10250, AllowedPorts: []int32{10250, 10255}, IdleTimeout: &metav1.Duration{Duration: time.Minute}, TLS: &v1.RelayTLS{CertFile: "c", KeyFile: "k", ClientCAFile: "ca"}}
	objs, err := Render(plan(2, 0), Relays(map[string]*v1.RelaySpec{"site-001": rl, "gone": rl}))
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeRelays(objs[0])
	if err != nil {
		t.Fatal(err)
	}
	if want := map[string]*v1.RelaySpec{"site-001": rl}; !reflect.DeepEqual(got, want) {
		t.Fatalf("relays %+v, want %+v", got, want)
	}
	objs, _ = Render(plan(2, 0))
	if got, err := DecodeRelays(objs[0]); got != nil || err != nil {
		t.Fatalf("no relays: %v %v", got, err)
	}
}

// TestScale: 10,000 dual-stack nodes, over 200 sites or in one site, keep
// every object far below etcd's limit. The sizes are logged.
func TestScale(t *testing.T) {
	for _, tc := range []struct {
		name         string
		sites, nodes int
		objects      int
	}{
		{"200 sites", 200, 10000, 1 + 200 + 200},
		{"one site", 1, 10000, 1 + 64 + 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs := roundTrip(t, plan(tc.sites, tc.nodes), 5)
			if len(objs) != tc.objects {
				t.Fatalf("%d objects, want %d", len(objs), tc.objects)
			}
			sl, ix, _ := WriteOrder(objs)
			total, largest, largestIndex := 0, 0, 0
			for _, o := range sl {
				total += Size(o)
				largest = max(largest, Size(o))
			}
			for _, o := range ix {
				largestIndex = max(largestIndex, Size(o))
			}
			t.Logf("base %d bytes; %d slices: largest %d bytes, total %d; %d indexes, largest %d bytes", Size(objs[0]), len(sl), largest, total, len(ix), largestIndex)
			if Size(objs[0]) > MaxObjectBytes/4 || largest > MaxObjectBytes/4 || largestIndex > MaxObjectBytes/4 {
				t.Fatalf("an object over a quarter of the bound")
			}
		})
	}
}

func BenchmarkRender(b *testing.B) {
	for _, tc := range []struct {
		name         string
		sites, nodes int
	}{{"200sites-10000nodes", 200, 10000}, {"1site-10000nodes", 1, 10000}} {
		b.Run(tc.name, func(b *testing.B) {
			sites := plan(tc.sites, tc.nodes)
			var objs []*corev1.ConfigMap
			for b.Loop() {
				var err error
				if objs, err = Render(sites); err != nil {
					b.Fatal(err)
				}
			}
			largest, total := 0, 0
			sl, _, _ := WriteOrder(objs)
			for _, o := range sl {
				total += Size(o)
				largest = max(largest, Size(o))
			}
			b.ReportMetric(float64(Size(objs[0])), "base-bytes")
			b.ReportMetric(float64(largest), "max-slice-bytes")
			b.ReportMetric(float64(total)/float64(tc.nodes), "slice-bytes/node")
		})
	}
}

func BenchmarkAssemble(b *testing.B) {
	objs, err := Render(plan(1, 10000))
	if err != nil {
		b.Fatal(err)
	}
	m := byName(objs)
	for b.Loop() {
		if _, err := Assemble(objs[0], m, "site-000"); err != nil {
			b.Fatal(err)
		}
	}
}

// FuzzAssemble feeds arbitrary base and slice data to Assemble. It must
// not panic, and what it accepts must render and assemble back to itself.
func FuzzAssemble(f *testing.F) {
	objs, err := Render(plan(2, 3))
	if err != nil {
		f.Fatal(err)
	}
	idx, err := DecodeIndex(objs[2]) // site-000's: one slice, then its index
	if err != nil {
		f.Fatal(err)
	}
	lists, err := yaml.Marshal(map[string][]SliceRef{"site-000": idx.Slices, "site-001": {}})
	if err != nil {
		f.Fatal(err)
	}
	f.Add(objs[0].Data[SitesKey], string(lists), objs[1].Data[NodesKey])
	f.Add("sites: []\n", "{}\n", "")
	f.Add("sites:\n- name: a\n", "a: [{name: bridgehead-catalog-a-0, hash: x}]\n", "nodes: [{name: n, address: 10.0.0.1}]\n")
	f.Fuzz(func(t *testing.T, sitesData, slicesData, nodesData string) {
		base := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: BaseName}, Data: map[string]string{SitesKey: sitesData, SlicesKey: slicesData}}
		refs := map[string][]SliceRef{}
		_ = decodeStrict([]byte(slicesData), &refs)
		sl := map[string]*corev1.ConfigMap{}
		var site string
		for name, list := range refs {
			site = name
			for _, r := range list {
				sl[r.Name] = &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Name}, Data: map[string]string{NodesKey: nodesData}}
			}
		}
		got, err := Assemble(base, sl, site)
		if err != nil {
			return
		}
		again, err := Render(got)
		if err != nil {
			return // accepted data may hold names Render refuses
		}
		for _, s := range got {
			back, err := Assemble(again[0], byName(again), s.Name)
			if err != nil {
				t.Fatalf("re-rendered catalog: %v", err)
			}
			for i := range back {
				if back[i].Name == s.Name && len(back[i].Nodes) != len(s.Nodes) {
					t.Fatalf("site %s: %d nodes back, had %d", s.Name, len(back[i].Nodes), len(s.Nodes))
				}
			}
		}
	})
}
