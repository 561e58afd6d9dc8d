package nodeagent

import (
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

func loadCatalog(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(filepath.Join("testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); problems != nil {
		t.Fatalf("test catalog does not pass config.Check:\n%v", problems)
	}
	return c
}

func routeStrings(rs []Route) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.String()+" # "+r.Why)
	}
	return out
}

func TestFromConfig(t *testing.T) {
	c := loadCatalog(t)
	tests := []struct {
		node        string
		pod, pod6   string
		routes      []string
		clusterSize int
	}{
		{"a1", "10.244.1.0/24", "fd00:244:0:1::/64", []string{
			"10.244.2.0/24 via 10.224.0.12 # node a2",
			"10.245.0.0/16 via 10.224.0.4 # site b pod",
			"192.168.50.0/24 via 10.224.0.4 # site b node",
			"fd00:50::/64 via fd00:224::4 # site b node",
			"fd00:244:0:2::/64 via fd00:224::12 # node a2",
			"fd00:245::/56 via fd00:224::4 # site b pod",
		}, 10},
		{"b2", "10.245.2.0/24", "", []string{
			"10.224.0.0/16 via 192.168.50.2 via 192.168.50.3 # site a node",
			"10.244.0.0/16 via 192.168.50.2 via 192.168.50.3 # site a pod",
			"10.245.1.0/24 via 192.168.50.11 # node b1",
			"fd00:224::/64 via fd00:50::2 via fd00:50::3 # site a node",
			"fd00:244::/56 via fd00:50::2 via fd00:50::3 # site a pod",
			"fd00:245:0:1::/64 via fd00:50::11 # node b1",
		}, 10},
	}
	for _, tc := range tests {
		t.Run(tc.node, func(t *testing.T) {
			d, err := FromConfig(c, tc.node)
			if err != nil {
				t.Fatal(err)
			}
			if d.PodCIDR.String() != tc.pod || (tc.pod6 != "" && d.PodCIDR6.String() != tc.pod6) || (tc.pod6 == "" && d.PodCIDR6.IsValid()) {
				t.Errorf("pod blocks %v %v, want %s %s", d.PodCIDR, d.PodCIDR6, tc.pod, tc.pod6)
			}
			got := routeStrings(d.Routes)
			if strings.Join(got, "\n") != strings.Join(tc.routes, "\n") {
				t.Errorf("routes:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.routes, "\n"))
			}
			if len(d.ClusterCIDRs) != tc.clusterSize {
				t.Errorf("cluster CIDRs %v, want %d", d.ClusterCIDRs, tc.clusterSize)
			}
		})
	}
}

func TestFromConfigErrors(t *testing.T) {
	c := loadCatalog(t)
	tests := []struct{ node, want string }{
		{"", "no node name"},
		{"c9", `no node "c9" in the nodes of any site (the nodes are a/a1, a/a2, b/b1, b/b2)`},
	}
	for _, tc := range tests {
		_, err := FromConfig(c, tc.node)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("FromConfig(%q) = %v, want %q", tc.node, err, tc.want)
		}
	}
}

func TestMergeRanges(t *testing.T) {
	p := netip.MustParsePrefix
	tests := []struct {
		in   []netip.Prefix
		want string
	}{
		{nil, ""},
		{[]netip.Prefix{p("10.0.0.0/24")}, "10.0.0.0-10.0.0.255"},
		{[]netip.Prefix{p("10.0.1.0/24"), p("10.0.0.0/24")}, "10.0.0.0-10.0.1.255"},
		{[]netip.Prefix{p("10.0.0.0/16"), p("10.0.5.0/24")}, "10.0.0.0-10.0.255.255"},
		{[]netip.Prefix{p("10.0.0.0/24"), p("10.0.2.0/24")}, "10.0.0.0-10.0.0.255 10.0.2.0-10.0.2.255"},
		{[]netip.Prefix{p("0.0.0.0/0")}, "0.0.0.0-255.255.255.255"},
		{[]netip.Prefix{p("fd00::/64"), p("fd00:0:0:1::/64")}, "fd00::-fd00::1:ffff:ffff:ffff:ffff"},
	}
	for _, tc := range tests {
		var parts []string
		for _, r := range mergeRanges(tc.in) {
			parts = append(parts, r[0].String()+"-"+r[1].String())
		}
		if got := strings.Join(parts, " "); got != tc.want {
			t.Errorf("mergeRanges(%v) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// The top of the address space has no interval end element.
	if els := intervalElements([]netip.Prefix{p("0.0.0.0/0")}); len(els) != 1 {
		t.Errorf("0.0.0.0/0: %d elements, want 1", len(els))
	}
}

// TestFromConfigGatewayNode: on a node that is also one of its site's
// gateways (an in-cluster gateway), the agent leaves the other sites'
// routes to the gateway, whose dev bh0 routes its own would replace, and
// keeps the routes to the nodes of its site.
func TestFromConfigGatewayNode(t *testing.T) {
	c := loadCatalog(t)
	gw := c.Sites[0].Gateways[0]
	c.Sites[0].Nodes = append(c.Sites[0].Nodes, config.Node{Name: "gwnode", Address: gw.Address, Address6: gw.Address6,
		PodCIDR: netip.MustParsePrefix("10.244.9.0/24"), PodCIDR6: netip.MustParsePrefix("fd00:244:0:9::/64")})
	d, err := FromConfig(c, "gwnode")
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(routeStrings(d.Routes), "\n")
	want := strings.Join([]string{
		"10.244.1.0/24 via 10.224.0.11 # node a1",
		"10.244.2.0/24 via 10.224.0.12 # node a2",
		"fd00:244:0:1::/64 via fd00:224::11 # node a1",
		"fd00:244:0:2::/64 via fd00:224::12 # node a2",
	}, "\n")
	if got != want {
		t.Errorf("routes of a gateway's node:\n%s\nwant only its site's nodes:\n%s", got, want)
	}
}
