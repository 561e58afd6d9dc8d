package config

import (
	"crypto/ecdh"
	"encoding/base64"
	"fmt"
	"slices"
	"strings"
	"testing"
)

// hubSite describes a site of a generated catalog: one gateway per
// entry of endpoints, with an endpoint when true.
type hubSite struct {
	name      string
	endpoints []bool
	via       []string
}

// testKey is a valid X25519 public key made from seed.
func testKey(t *testing.T, seed byte) string {
	t.Helper()
	priv := make([]byte, 32)
	for i := range priv {
		priv[i] = seed
	}
	k, err := ecdh.X25519().NewPrivateKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
}

// hubCatalog renders a catalog with the given sites; this gateway is the
// first gateway of the first site. keys, when set, replaces gateway
// keys by "site/gateway" name.
func hubCatalog(t *testing.T, sites []hubSite, keys map[string]string) string {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "site: %s\ngateway: gw0\nprivateKeyFile: k\nsites:\n", sites[0].name)
	seed := byte(1)
	for i, s := range sites {
		fmt.Fprintf(&b, "  - name: %s\n    nodeCIDRs: [10.%d.0.0/16]\n    podCIDRs: [10.%d.0.0/16]\n", s.name, i+1, i+101)
		if len(s.via) > 0 {
			b.WriteString("    via:\n")
			for _, v := range s.via {
				fmt.Fprintf(&b, "      - %s\n", v)
			}
		}
		b.WriteString("    gateways:\n")
		for j, ep := range s.endpoints {
			key := testKey(t, seed)
			seed++
			if k, ok := keys[fmt.Sprintf("%s/gw%d", s.name, j)]; ok {
				key = k
			}
			fmt.Fprintf(&b, "      - name: gw%d\n        address: 10.%d.0.%d\n        publicKey: %q\n", j, i+1, j+4, key)
			if ep {
				fmt.Fprintf(&b, "        endpoint: 198.51.100.%d:51820\n", 10*i+j+1)
			}
		}
	}
	return b.String()
}

// lineWith returns the 1-based line of the n-th (from 1) line of data
// that starts with text after its indentation.
func lineWith(data, text string, n int) int {
	for i, l := range strings.Split(data, "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), text) {
			if n--; n == 0 {
				return i + 1
			}
		}
	}
	return 0
}

func TestCheckHubs(t *testing.T) {
	pub := []bool{true}
	two := []bool{true, true}
	nat := []bool{false}
	mixed := []bool{true, false}
	type want struct {
		line  func(data string) int
		field string
		msg   string
	}
	at := func(text string, n int) func(string) int {
		return func(data string) int { return lineWith(data, text, n) }
	}
	tests := []struct {
		name     string
		sites    []hubSite
		keys     func(t *testing.T) map[string]string
		problems []want
		warnings []want
		hubs     map[string][]string
	}{
		{name: "edge sites without endpoints reach each other through the public site",
			sites: []hubSite{{name: "aks", endpoints: two}, {name: "e1", endpoints: nat}, {name: "e2", endpoints: nat}, {name: "e3", endpoints: nat}},
			hubs:  map[string][]string{"e1": {"aks"}, "e2": {"aks"}, "aks": nil}},
		{name: "every public site is a default hub, and relays only for sites that need it",
			sites: []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}, {name: "gke", endpoints: mixed}, {name: "e2", endpoints: nat}},
			hubs:  map[string][]string{"e1": {"aks", "gke"}, "aks": nil, "gke": {"aks"}}},
		{name: "sites behind NAT that share no hub",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "gke", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"aks"}}, {name: "e2", endpoints: nat, via: []string{"gke"}}},
			problems: []want{{at("via:", 2), "sites[3].via", `site "e2" relays through gke and site "e1" (sites[2], line 21) through aks: they share no hub`}}},
		{name: "via chooses the hub",
			sites: []hubSite{{name: "aks", endpoints: pub}, {name: "gke", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"gke"}}, {name: "e2", endpoints: nat}},
			hubs:  map[string][]string{"e1": {"gke"}, "e2": {"aks", "gke"}}},
		{name: "one site behind NAT needs no hub",
			sites: []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}}},
		{name: "a site alone needs nothing",
			sites: []hubSite{{name: "e1", endpoints: nat}}},
		{name: "two sites behind NAT and no hub",
			sites: []hubSite{{name: "e1", endpoints: nat}, {name: "e2", endpoints: []bool{false, false}}},
			problems: []want{
				{at("gateways:", 1), "sites[0].gateways", `no gateway of site "e1" has an endpoint and it has no hub: it cannot reach site "e2" (sites[1], line 12)`},
				{at("gateways:", 2), "sites[1].gateways", `no gateway of site "e2" has an endpoint and it has no hub: it cannot reach site "e1" (sites[0], line 5)`},
			}},
		{name: "via names no site",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"aksx"}}},
			problems: []want{{at("- aksx", 1), "sites[1].via[0]", `"aksx" is not a site (did you mean "aks"?)`}}},
		{name: "via names the site itself",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"e1"}}},
			problems: []want{{at("- e1", 1), "sites[1].via[0]", `"e1" is this site itself`}}},
		{name: "via lists a hub twice",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"aks", "aks"}}},
			problems: []want{{at("- aks", 2), "sites[1].via[1]", `"aks" is listed twice`}}},
		{name: "a hub without endpoint",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat, via: []string{"e2"}}, {name: "e2", endpoints: nat}},
			problems: []want{{at("- e2", 1), "sites[1].via[0]", `hub "e2" has no gateway with an endpoint (sites[2], line 22)`}}},
		{name: "a cycle of hubs",
			sites:    []hubSite{{name: "m1", endpoints: mixed, via: []string{"m2"}}, {name: "m2", endpoints: mixed, via: []string{"m3"}}, {name: "m3", endpoints: mixed, via: []string{"m1"}}},
			problems: []want{{at("- m1", 1), "sites[2].via[0]", "cycle of hubs: m1 → m2 → m3 → m1"}}},
		{name: "via on a site reached directly",
			sites:    []hubSite{{name: "aks", endpoints: pub}, {name: "gke", endpoints: two, via: []string{"aks"}}},
			warnings: []want{{at("via:", 1), "sites[1].via", `has no effect: every gateway of site "gke" has an endpoint`}},
			hubs:     map[string][]string{"gke": nil}},
		{name: "key IDs collide",
			sites: []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat}},
			keys: func(t *testing.T) map[string]string {
				b, _ := base64.StdEncoding.DecodeString(testKey(t, 1))
				b[31] ^= 1
				return map[string]string{"e1/gw0": base64.StdEncoding.EncodeToString(b)}
			},
			problems: []want{{at("publicKey:", 2), "sites[1].gateways[0].publicKey", "starts with the same 8 bytes as sites[0].gateways[0].publicKey (line 11)"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var keys map[string]string
			if tc.keys != nil {
				keys = tc.keys(t)
			}
			data := hubCatalog(t, tc.sites, keys)
			c, problems, warnings := CheckData("c.yaml", []byte(data), CheckOptions{SkipPrivateKey: true})
			match := func(kind string, got ErrorList, want []want) {
				t.Helper()
				var g, w []string
				for _, e := range got {
					g = append(g, e.Error())
				}
				for _, x := range want {
					w = append(w, fmt.Sprintf("c.yaml:%d: %s: %s", x.line(data), x.field, x.msg))
				}
				if len(g) != len(w) {
					t.Fatalf("%s:\n%s\nwant\n%s\ncatalog:\n%s", kind, strings.Join(g, "\n"), strings.Join(w, "\n"), data)
				}
				for i := range g {
					if !strings.HasPrefix(g[i], w[i]) {
						t.Errorf("%s %d:\n got %s\nwant %s...", kind, i, g[i], w[i])
					}
				}
			}
			match("problems", problems, tc.problems)
			match("warnings", warnings, tc.warnings)
			for site, want := range tc.hubs {
				if got := c.HubsOf(site); !slices.Equal(got, want) {
					t.Errorf("HubsOf(%s) = %v, want %v", site, got, want)
				}
			}
		})
	}
}

// TestCheckRelayMTU: an interface.mtu written in the file that leaves no
// room for the relay header on a gateway whose datagrams can go through
// a hub is a warning; the default and "auto" (the daemon lowers them)
// and a gateway that is never relayed are not.
func TestCheckRelayMTU(t *testing.T) {
	pub := []bool{true}
	nat := []bool{false}
	for _, tc := range []struct {
		name  string
		sites []hubSite
		mtu   string // interface.mtu, "" to leave it out
		warn  string // the start of the warning, "" for none
	}{
		{"behind NAT, 1420 written", []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}, {name: "e2", endpoints: nat}}, "1420",
			"1420 is too large for datagrams relayed through a hub: a full-size one is 1520 bytes on the WAN"},
		{"behind NAT, 1380 written", []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}, {name: "e2", endpoints: nat}}, "1380", ""},
		{"behind NAT, default", []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}, {name: "e2", endpoints: nat}}, "", ""},
		{"behind NAT, auto", []hubSite{{name: "e1", endpoints: nat}, {name: "aks", endpoints: pub}, {name: "e2", endpoints: nat}}, "auto", ""},
		{"public gateway, 1420 written", []hubSite{{name: "aks", endpoints: pub}, {name: "e1", endpoints: nat}, {name: "e2", endpoints: nat}}, "1420", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data := hubCatalog(t, tc.sites, nil)
			if tc.mtu != "" {
				data = "interface: {name: bh0, mtu: " + tc.mtu + "}\n" + data
			}
			_, problems, warnings := CheckData("c.yaml", []byte(data), CheckOptions{SkipPrivateKey: true})
			if len(problems) > 0 {
				t.Fatalf("problems: %v", problems)
			}
			var got []string
			for _, w := range warnings {
				if w.Field == "interface.mtu" {
					got = append(got, w.Error())
				}
			}
			switch {
			case tc.warn == "" && len(got) > 0:
				t.Errorf("warnings %q, want none", got)
			case tc.warn != "" && (len(got) != 1 || !strings.HasPrefix(got[0], "c.yaml:1: interface.mtu: "+tc.warn)):
				t.Errorf("warnings %q, want one starting %q", got, "c.yaml:1: interface.mtu: "+tc.warn)
			}
		})
	}
}
