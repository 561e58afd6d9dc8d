package config

import (
	"net/netip"
	"slices"
	"strings"
	"testing"
)

// nodeCatalog is a catalog of two dual-stack sites of two nodes each, as
// the controller publishes it (sites only).
const nodeCatalog = `sites:
  - name: a
    nodeCIDRs: [10.224.0.0/16, fd00:224::/64]
    podCIDRs: [10.244.0.0/16, fd00:244::/56]
    routerAddress: 10.224.0.4
    gateways:
      - {name: gw-a1, address: 10.224.0.2, address6: fd00:224::2, endpoint: "198.51.100.1:51820", publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=}
    nodes:
      - {name: a1, address: 10.224.0.11, podCIDR: 10.244.1.0/24, address6: fd00:224::11, podCIDR6: fd00:244:0:1::/64}
      - {name: a2, address: 10.224.0.12, podCIDR: 10.244.2.0/24, address6: fd00:224::12, podCIDR6: fd00:244:0:2::/64}
  - name: b
    nodeCIDRs: [192.168.50.0/24, fd00:50::/64]
    podCIDRs: [10.245.0.0/16, fd00:245::/56]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: "203.0.113.7:51820", publicKey: fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M=}
      - {name: gw-b2, address: 192.168.50.3, endpoint: "203.0.113.8:51820", publicKey: OS0XSjizsb6vrx/oJIcIQcX6UxvG6v22QCwSRmRIjBw=}
    nodes:
      - {name: b1, address: 192.168.50.11, podCIDR: 10.245.1.0/24}
      - {name: b2, address: 192.168.50.12, podCIDR: 10.245.2.0/24}
`

// TestCheckNode: for node a1, a problem of another node (of its site or
// another) or of another site's gateways is skipped, the bad node left
// out; a problem of its own entry, its site, another site's CIDRs or the
// service CIDRs refuses the catalog. Check still refuses every bad one.
func TestCheckNode(t *testing.T) {
	pfx := netip.MustParsePrefix
	addr := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		mutate func(c *Config)
		// refused: the fields of the problems; skipped: of the skipped
		// ones; nodes: the nodes of a and b kept.
		refused, skipped []string
		nodes            string
	}{
		{name: "clean", mutate: func(*Config) {}, nodes: "a1 a2 | b1 b2"},
		{name: "node of another site out of its pool",
			mutate:  func(c *Config) { c.Sites[1].Nodes[0].PodCIDR = pfx("10.244.9.0/24") },
			skipped: []string{"sites[1].nodes[0].podCIDR"}, nodes: "a1 a2 | b2"},
		{name: "node of another site out of its node CIDRs",
			mutate:  func(c *Config) { c.Sites[1].Nodes[1].Address = addr("10.9.9.9") },
			skipped: []string{"sites[1].nodes[1].address"}, nodes: "a1 a2 | b1"},
		{name: "other node of its site out of the pool",
			mutate:  func(c *Config) { c.Sites[0].Nodes[1].PodCIDR = pfx("10.245.9.0/24") },
			skipped: []string{"sites[0].nodes[1].podCIDR"}, nodes: "a1 | b1 b2"},
		{name: "other node of its site overlaps it",
			mutate:  func(c *Config) { c.Sites[0].Nodes[1].PodCIDR6 = pfx("fd00:244:0:1::/64") },
			skipped: []string{"sites[0].nodes[1].podCIDR6"}, nodes: "a1 | b1 b2"},
		{name: "gateway of another site",
			mutate:  func(c *Config) { c.Sites[1].Gateways[1].Address = addr("10.9.9.9") },
			skipped: []string{"sites[1].gateways[1].address"}, nodes: "a1 a2 | b1 b2"},
		{name: "another site without gateways",
			mutate:  func(c *Config) { c.Sites[1].Gateways = nil },
			skipped: []string{"sites[1].gateways"}, nodes: "a1 a2 | b1 b2"},
		{name: "its own node out of the pool",
			mutate:  func(c *Config) { c.Sites[0].Nodes[0].PodCIDR = pfx("10.245.9.0/24") },
			refused: []string{"sites[0].nodes[0].podCIDR"}},
		{name: "another node takes its name",
			mutate:  func(c *Config) { c.Sites[0].Nodes[1].Name = "a1" },
			refused: []string{"sites[0].nodes[1].name"}},
		{name: "its site's router address",
			mutate:  func(c *Config) { c.Sites[0].RouterAddress = addr("10.9.9.9") },
			refused: []string{"sites[0].routerAddress"}},
		{name: "its site's gateway",
			mutate:  func(c *Config) { c.Sites[0].Gateways[0].Address = addr("10.9.9.9") },
			refused: []string{"sites[0].gateways[0].address"}},
		{name: "another site's CIDR",
			mutate:  func(c *Config) { c.Sites[1].PodCIDRs[0] = pfx("10.245.0.1/16") },
			refused: []string{"sites[1].podCIDRs[0]"}},
		{name: "a service CIDR over another site's",
			mutate:  func(c *Config) { c.Cluster.ServiceCIDRs = []netip.Prefix{pfx("192.168.50.0/25")} },
			refused: []string{"cluster.serviceCIDRs[0]"}},
		{name: "bad entries in both",
			mutate: func(c *Config) {
				c.Sites[1].Nodes[0].PodCIDR = pfx("10.244.9.0/24")
				c.Sites[0].Nodes[0].Address = addr("10.9.9.9")
			},
			refused: []string{"sites[0].nodes[0].address"}, skipped: []string{"sites[1].nodes[0].podCIDR"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseSites("catalog.yaml", []byte(nodeCatalog))
			if err != nil {
				t.Fatal(err)
			}
			tc.mutate(c)
			before := nodeList(c)
			kept, problems, skipped := CheckNode(c, "a1", CheckOptions{SkipPrivateKey: true})
			if got := fields(problems); !slices.Equal(got, tc.refused) {
				t.Errorf("refused %v, want %v:\n%v", got, tc.refused, problems)
			}
			if got := fields(skipped); !slices.Equal(got, tc.skipped) {
				t.Errorf("skipped %v, want %v:\n%v", got, tc.skipped, skipped)
			}
			if nodeList(c) != before {
				t.Errorf("CheckNode changed its argument: %s, was %s", nodeList(c), before)
			}
			if len(tc.refused) > 0 {
				if kept != nil {
					t.Errorf("refused, but kept %s", nodeList(kept))
				}
				return
			}
			if kept == nil || nodeList(kept) != tc.nodes {
				t.Fatalf("kept %v, want nodes %s", kept, tc.nodes)
			}
			if p, _ := Check(kept, CheckOptions{SkipPrivateKey: true}); len(tc.skipped) > 0 && strings.Contains(tc.skipped[0], ".nodes[") && len(p) > 0 {
				t.Errorf("the nodes kept still fail Check:\n%v", p)
			}
			// Check is unchanged: a gateway refuses every bad catalog.
			if p, _ := Check(c, CheckOptions{SkipPrivateKey: true}); (len(p) > 0) != (len(tc.skipped) > 0) {
				t.Errorf("Check: %v, want problems %v", p, tc.skipped)
			}
		})
	}
}

func fields(l ErrorList) []string {
	var out []string
	for _, e := range l {
		out = append(out, e.Field)
	}
	return out
}

// nodeList is "a1 a2 | b1 b2": the node names of each site.
func nodeList(c *Config) string {
	var sites []string
	for _, s := range c.Sites {
		var names []string
		for _, n := range s.Nodes {
			names = append(names, n.Name)
		}
		sites = append(sites, strings.Join(names, " "))
	}
	return strings.Join(sites, " | ")
}
