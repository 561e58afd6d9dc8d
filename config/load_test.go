package config

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
)

const fixtureFile = "bridgehead.yaml"

// testLoader resolves a fixed set of names and fails for any other.
func testLoader() loader {
	hosts := map[string][]string{
		"gw-b.example.net": {"2001:db8::b", "203.0.113.7"},
		"v6only.example":   {"2001:db8::6"},
		"junk.example":     {"not-an-ip"},
	}
	return loader{lookupHost: func(ctx context.Context, host string) ([]string, error) {
		if a, ok := hosts[host]; ok {
			return a, nil
		}
		return nil, fmt.Errorf("lookup %s: no such host", host)
	}}
}

func readFixture(t testing.TB) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "valid.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// edit replaces 1-based lines of text. A replacement may hold newlines to
// insert lines after the replaced one.
func edit(t testing.TB, text string, repl map[int]string) string {
	t.Helper()
	lines := strings.Split(text, "\n")
	for n, s := range repl {
		if n < 1 || n > len(lines) {
			t.Fatalf("edit: no line %d", n)
		}
		lines[n-1] = s
	}
	return strings.Join(lines, "\n")
}

func parseFixture(t testing.TB, repl map[int]string) (*Config, error) {
	t.Helper()
	return testLoader().parse(fixtureFile, []byte(edit(t, readFixture(t), repl)))
}

func mustParse(t testing.TB, repl map[int]string) *Config {
	t.Helper()
	c, err := parseFixture(t, repl)
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	return c
}

// want is an expected problem: exact line and field, message substring.
type want struct {
	line  int
	field string
	msg   string
}

func (w want) String() string { return fmt.Sprintf("%d: %s: ...%s...", w.line, w.field, w.msg) }

// matchErrors checks that got holds exactly the wanted problems, in order.
func matchErrors(t *testing.T, got ErrorList, wants []want) {
	t.Helper()
	got = got.sorted()
	ok := len(got) == len(wants)
	for i := 0; ok && i < len(got); i++ {
		e, w := got[i], wants[i]
		ok = e.File == fixtureFile && e.Line == w.line && e.Field == w.field && strings.Contains(e.Msg, w.msg)
	}
	if !ok {
		t.Errorf("got problems:\n%v\nwant:\n%v", got, wants)
	}
}

func asList(t *testing.T, err error) ErrorList {
	t.Helper()
	var l ErrorList
	if !errors.As(err, &l) {
		t.Fatalf("error %v (%T) is not an ErrorList", err, err)
	}
	return l
}

func TestParseValid(t *testing.T) {
	c := mustParse(t, nil)
	checks := []struct {
		name      string
		got, want any
	}{
		{"Path", c.Path, fixtureFile},
		{"Site", c.Site, "a"},
		{"Gateway", c.Gateway, "gw-a1"},
		{"Cipher", c.Cipher, "chachapoly"},
		{"ListenAddr", c.ListenAddr, netip.MustParseAddrPort("0.0.0.0:51820")},
		{"Interface", c.Interface, Interface{Name: "bh0", MTU: MTU{Value: 1380}}},
		{"Cluster.Name", c.Cluster.Name, "lab"},
		{"ServiceCIDRs", fmt.Sprint(c.Cluster.ServiceCIDRs), "[10.96.0.0/16]"},
		{"DNSServiceIP", c.Cluster.DNSServiceIP, netip.MustParseAddr("10.96.0.10")},
		{"Metrics", c.Metrics.Listen, "127.0.0.1:9090"},
		{"ControlSocket", c.ControlSocket, "/run/bridgehead.sock"},
		{"ClampMSSEnabled", c.ClampMSSEnabled(), false},
		{"sites", len(c.Sites), 2},
		{"a.NodeCIDRs", fmt.Sprint(c.Sites[0].NodeCIDRs), "[10.0.0.0/16 fd00:a::/64]"},
		{"a.RouterAddress", c.Sites[0].RouterAddress, netip.MustParseAddr("10.0.0.5")},
		{"a.Keepalive", c.Sites[0].Keepalive, 25 * time.Second},
		{"a.nodes", fmt.Sprint(c.Sites[0].Nodes), "[{a-node1 10.0.1.1 10.244.1.0/24 invalid IP invalid Prefix} {a-node2 10.0.1.2 10.244.2.0/24 invalid IP invalid Prefix}]"},
		{"gw-a1.EndpointAddr", c.Sites[0].Gateways[0].EndpointAddr, netip.MustParseAddrPort("198.51.100.1:51820")},
		{"gw-a2.EndpointAddr", c.Sites[0].Gateways[1].EndpointAddr, netip.MustParseAddrPort("[2001:db8::1]:51820")},
		// Resolved; the IPv4 answer is preferred to match the IPv4 listener.
		{"gw-b1.EndpointAddr", c.Sites[1].Gateways[0].EndpointAddr, netip.MustParseAddrPort("203.0.113.7:51821")},
		{"b.PodCIDRs", fmt.Sprint(c.Sites[1].PodCIDRs), "[10.245.0.0/16 fd00:b:1::/56]"},
		{"LocalSite", c.LocalSite().Name, "a"},
		{"LocalGateway", c.LocalGateway().Name, "gw-a1"},
		{"SiteByName", c.SiteByName("b") == &c.Sites[1], true},
		{"SiteByName missing", c.SiteByName("zz") == nil, true},
		{"PrivateKeyPath", c.PrivateKeyPath(), "gw-a1.key"},
		{"Line", c.Line("sites[1].podCIDRs[1]"), 49},
		{"Line of absent field", c.Line("sites[1].routerAddress"), 44},
		{"Hash length", len(c.Hash()), 12},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestDefaults(t *testing.T) {
	minimal := `site: a
gateway: g
sites:
  - name: a
    gateways:
      - name: g
        endpoint: 192.0.2.1:51820
        publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=
`
	c, err := testLoader().parse("min.yaml", []byte(minimal))
	if err != nil {
		t.Fatal(err)
	}
	checks := []struct {
		name      string
		got, want any
	}{
		{"Listen", c.Listen, DefaultListen},
		{"ListenAddr", c.ListenAddr, netip.MustParseAddrPort(DefaultListen)},
		{"Cipher", c.Cipher, DefaultCipher},
		{"Interface.Name", c.Interface.Name, DefaultInterfaceName},
		{"Interface.MTU", c.Interface.MTU, MTU{Value: DefaultMTU, Default: true}},
		{"Cluster.Name", c.Cluster.Name, DefaultClusterName},
		{"ClampMSSEnabled", c.ClampMSSEnabled(), true},
		{"Keepalive", c.Sites[0].Keepalive, time.Duration(0)},
	}
	for _, tc := range checks {
		if tc.got != tc.want {
			t.Errorf("%s = %v, want %v", tc.name, tc.got, tc.want)
		}
	}
}

func TestParseValues(t *testing.T) {
	tests := []struct {
		name string
		repl map[int]string
		get  func(c *Config) any
		want any
	}{
		{"mtu auto", map[int]string{9: "  mtu: auto"}, func(c *Config) any { return c.Interface.MTU }, MTU{Auto: true}},
		{"mtu hex", map[int]string{9: "  mtu: 0x5dc"}, func(c *Config) any { return c.Interface.MTU }, MTU{Value: 1500}},
		{"clampMSS true", map[int]string{18: "clampMSS: true"}, func(c *Config) any { return c.ClampMSSEnabled() }, true},
		{"clampMSS null is default", map[int]string{18: "clampMSS:"}, func(c *Config) any { return c.ClampMSSEnabled() }, true},
		{"earlyDrop default", map[int]string{}, func(c *Config) any { return c.EarlyDropEnabled() }, true},
		{"earlyDrop false", map[int]string{18: "earlyDrop: false"}, func(c *Config) any { return c.EarlyDropEnabled() }, false},
		{"lanes default", map[int]string{}, func(c *Config) any { return c.LaneCount() }, min(runtime.NumCPU(), MaxLanes)},
		{"lanes 3", map[int]string{18: "lanes: 3"}, func(c *Config) any { return c.LaneCount() }, 3},
		{"express default", map[int]string{}, func(c *Config) any { return c.ExpressEnabled() }, true},
		{"express false", map[int]string{18: "express: false"}, func(c *Config) any { return c.ExpressEnabled() }, false},
		{"expressPriority default is 10", map[int]string{}, func(c *Config) any { return c.ExpressPriorityOrDefault() }, 10},
		{"expressPriority 30", map[int]string{18: "expressPriority: 30"}, func(c *Config) any { return c.ExpressPriorityOrDefault() }, 30},
		{"expressPriority 0 is off", map[int]string{18: "expressPriority: 0"}, func(c *Config) any { return c.ExpressPriorityOrDefault() }, 0},
		{"expressPriority without express", map[int]string{18: "express: false\nexpressPriority: 30"}, func(c *Config) any { return c.ExpressPriorityOrDefault() }, 0},
		{"codel default", map[int]string{}, func(c *Config) any { return c.CoDel }, CoDel{}},
		{"drain default", map[int]string{}, func(c *Config) any { return [2]time.Duration{c.DrainTimeout(), c.DrainQuiet()} }, [2]time.Duration{DefaultDrainTimeout, DefaultDrainQuiet}},
		{"drain", map[int]string{18: "drain: {timeout: 1m, quiet: 500ms}"}, func(c *Config) any { return c.Drain }, Drain{Timeout: time.Minute, Quiet: 500 * time.Millisecond}},
		{"codel", map[int]string{18: "codel: {target: 5ms, interval: 100ms}"}, func(c *Config) any { return c.CoDel }, CoDel{Target: 5 * time.Millisecond, Interval: 100 * time.Millisecond}},
		{"codel target only", map[int]string{18: "codel: {target: 10ms}"}, func(c *Config) any { return c.CoDel }, CoDel{Target: 10 * time.Millisecond}},
		{"no lan watch by default", map[int]string{}, func(c *Config) any { return c.LAN == nil }, true},
		{"lan interface", map[int]string{18: "lan: {interface: eth1}"}, func(c *Config) any { return c.LAN.Interface }, "eth1"},
		{"lan targets", map[int]string{18: "lan: {interface: eth1, targets: [10.0.0.1, 'fd00::1']}"}, func(c *Config) any { return fmt.Sprint(c.LAN.Targets) }, "[10.0.0.1 fd00::1]"},
		{"lan target timeout default", map[int]string{18: "lan: {interface: eth1, targets: [10.0.0.1]}"}, func(c *Config) any { return c.LAN.LANTargetTimeout() }, 500 * time.Millisecond},
		{"lan target timeout", map[int]string{18: "lan: {interface: eth1, targets: [10.0.0.1], targetTimeout: 800ms}"}, func(c *Config) any { return c.LAN.LANTargetTimeout() }, 800 * time.Millisecond},
		{"ipv6 listen", map[int]string{5: "listen: '[::]:51820'"}, func(c *Config) any { return c.ListenAddr }, netip.MustParseAddrPort("[::]:51820")},
		// Listening on the IPv6 wildcard, the first answer is taken.
		{"dual-stack listener takes first answer", map[int]string{5: "listen: '[::]:51820'"}, func(c *Config) any { return c.Sites[1].Gateways[0].EndpointAddr }, netip.MustParseAddrPort("[2001:db8::b]:51821")},
		{"v6-only name with v4 listener", map[int]string{53: "        endpoint: v6only.example:1"}, func(c *Config) any { return c.Sites[1].Gateways[0].EndpointAddr }, netip.MustParseAddrPort("[2001:db8::6]:1")},
		{"4in6 address unmapped", map[int]string{26: "    routerAddress: ::ffff:10.0.0.5"}, func(c *Config) any { return c.Sites[0].RouterAddress }, netip.MustParseAddr("10.0.0.5")},
		{"quoted cidr", map[int]string{22: `      - "10.0.0.0/16"`}, func(c *Config) any { return c.Sites[0].NodeCIDRs[0] }, netip.MustParsePrefix("10.0.0.0/16")},
		{"keepalive minutes", map[int]string{27: "    keepalive: 1m30s"}, func(c *Config) any { return c.Sites[0].Keepalive }, 90 * time.Second},
		{"anchor and alias", map[int]string{13: "    - &svc 10.96.0.0/16", 14: "  dnsServiceIP: 10.96.0.10\n  # alias below\n"}, func(c *Config) any { return c.Cluster.ServiceCIDRs[0] }, netip.MustParsePrefix("10.96.0.0/16")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.repl)
			if got := tc.get(c); got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestParseErrors(t *testing.T) {
	tests := []struct {
		name string
		repl map[int]string
		want []want
	}{
		{"unknown field", map[int]string{9: "  mtuu: 1380"},
			[]want{{9, "interface.mtuu", `unknown field (did you mean "mtu"?)`}}},
		{"unknown top-level field", map[int]string{5: "lisen: 0.0.0.0:1"},
			[]want{{5, "lisen", `unknown field (did you mean "listen"?)`}}},
		{"unknown field wrong case", map[int]string{21: "    nodeCidrs:"},
			[]want{{21, "sites[0].nodeCidrs", `did you mean "nodeCIDRs"?`}}},
		{"unknown field no suggestion", map[int]string{17: "frobnicate: 1"},
			[]want{{17, "frobnicate", "unknown field"}}},
		{"duplicate field", map[int]string{2: "site: a\nsite: b"},
			[]want{{3, "site", "duplicate field (first set on line 2)"}}},
		{"merge key", map[int]string{8: "  <<: {name: x}"},
			[]want{{8, "interface.<<", "merge keys"}}},
		{"bad CIDR", map[int]string{23: "      - 10.0.0.0/33"},
			[]want{{23, "sites[0].nodeCIDRs[1]", `"10.0.0.0/33" is not a CIDR`}}},
		{"CIDR without length", map[int]string{48: "      - 10.245.0.0"},
			[]want{{48, "sites[1].podCIDRs[0]", `"10.245.0.0" is not a CIDR`}}},
		{"list entry is a mapping", map[int]string{13: "    - {a: 1}"},
			[]want{{13, "cluster.serviceCIDRs[0]", "want a single value, got a mapping"}}},
		{"empty list entry", map[int]string{13: "    -"},
			[]want{{13, "cluster.serviceCIDRs[0]", "want a single value, got null"}}},
		{"scalar for list", map[int]string{21: "    nodeCIDRs: 10.0.0.0/16", 22: "", 23: ""},
			[]want{{21, "sites[0].nodeCIDRs", `want a list, got "10.0.0.0/16"`}}},
		{"scalar for mapping", map[int]string{7: "interface: bh0", 8: "", 9: ""},
			[]want{{7, "interface", `want a mapping, got "bh0"`}}},
		{"mapping for list", map[int]string{12: "  serviceCIDRs: {a: 1}", 13: ""},
			[]want{{12, "cluster.serviceCIDRs", "want a list, got a mapping"}}},
		{"bad address", map[int]string{26: "    routerAddress: 10.0.0.300"},
			[]want{{26, "sites[0].routerAddress", `"10.0.0.300" is not an IP address`}}},
		{"zoned address", map[int]string{34: "        address: fe80::1%eth0"},
			[]want{{34, "sites[0].gateways[1].address", "is not an IP address"}}},
		{"bad duration", map[int]string{27: "    keepalive: 25"},
			[]want{{27, "sites[0].keepalive", `"25" is not a duration`}}},
		{"negative duration", map[int]string{27: "    keepalive: -5s"},
			[]want{{27, "sites[0].keepalive", "is negative"}}},
		{"mtu too small", map[int]string{9: "  mtu: 100"},
			[]want{{9, "interface.mtu", "100 is out of range 576..65535"}}},
		{"mtu too big", map[int]string{9: "  mtu: 70000"},
			[]want{{9, "interface.mtu", "out of range"}}},
		{"mtu word", map[int]string{9: "  mtu: big"},
			[]want{{9, "interface.mtu", `"big" is not a number or "auto"`}}},
		{"mtu quoted number", map[int]string{9: `  mtu: "1400"`},
			[]want{{9, "interface.mtu", "is not a number"}}},
		{"clampMSS not bool", map[int]string{18: "clampMSS: yes"},
			[]want{{18, "clampMSS", `"yes" is not true or false`}}},
		{"earlyDrop not bool", map[int]string{18: "earlyDrop: 1"},
			[]want{{18, "earlyDrop", `"1" is not true or false`}}},
		{"express not bool", map[int]string{18: "express: yes please"},
			[]want{{18, "express", `"yes please" is not true or false`}}},
		{"expressPriority too high", map[int]string{18: "expressPriority: 100"},
			[]want{{18, "expressPriority", `100 is out of range 0..99`}}},
		{"expressPriority negative", map[int]string{18: "expressPriority: -1"},
			[]want{{18, "expressPriority", `-1 is out of range 0..99`}}},
		{"expressPriority not a number", map[int]string{18: "expressPriority: high"},
			[]want{{18, "expressPriority", `"high" is not a number`}}},
		{"lanes zero", map[int]string{18: "lanes: 0"},
			[]want{{18, "lanes", `0 is out of range 1..64`}}},
		{"lanes too many", map[int]string{18: "lanes: 65"},
			[]want{{18, "lanes", `65 is out of range 1..64`}}},
		{"lanes not a number", map[int]string{18: "lanes: many"},
			[]want{{18, "lanes", `"many" is not a number`}}},
		{"drain timeout too long", map[int]string{18: "drain: {timeout: 1h}"},
			[]want{{18, "drain.timeout", `1h0m0s is out of range 1s..10m0s`}}},
		{"drain quiet longer than the timeout", map[int]string{18: "drain: {timeout: 5s, quiet: 10s}"},
			[]want{{18, "drain", `quiet 10s is longer than timeout 5s`}}},
		{"codel target too small", map[int]string{18: "codel: {target: 10us}"},
			[]want{{18, "codel.target", `10µs is out of range 100µs..1s`}}},
		{"codel interval too long", map[int]string{18: "codel: {interval: 1m}"},
			[]want{{18, "codel.interval", `1m0s is out of range 1ms..10s`}}},
		{"codel not a duration", map[int]string{18: "codel: {target: 5}"},
			[]want{{18, "codel.target", `"5" is not a duration`}}},
		{"codel target above default interval", map[int]string{18: "codel: {target: 50ms}"},
			[]want{{18, "codel", `target 50ms is not below interval 20ms`}}},
		{"cipher", map[int]string{6: "cipher: rot13"},
			[]want{{6, "cipher", `"rot13" is not a cipher`}}},
		{"listen without port", map[int]string{5: "listen: 0.0.0.0"},
			[]want{{5, "listen", `"0.0.0.0" is not IP:port`}}},
		{"listen hostname", map[int]string{5: "listen: localhost:51820"},
			[]want{{5, "listen", "is not IP:port"}}},
		{"listen port 0", map[int]string{5: "listen: 0.0.0.0:0"},
			[]want{{5, "listen", "port 0"}}},
		{"metrics listen", map[int]string{16: "  listen: 9090"},
			[]want{{16, "metrics.listen", "is not host:port"}}},
		{"site missing", map[int]string{2: "# no site"},
			[]want{{3, "site", "is required"}}},
		{"site unknown", map[int]string{2: "site: c"},
			[]want{{2, "site", `"c" is not the name of any site`}}},
		{"gateway missing", map[int]string{3: ""},
			[]want{{2, "gateway", "is required"}}},
		{"gateway of another site", map[int]string{3: "gateway: gw-b1"},
			[]want{{3, "gateway", `"gw-b1" is not a gateway of site "a"`}}},
		{"duplicate site", map[int]string{44: "  - name: a"},
			[]want{{44, "sites[1].name", `duplicate site name "a" (also sites[0].name, line 20)`}}},
		{"bad site name", map[int]string{44: "  - name: b b"},
			[]want{{44, "sites[1].name", "is not a valid name"}}},
		{"site without name", map[int]string{44: "  - nodeCIDRs: [10.3.0.0/16]"},
			[]want{{44, "sites[1].name", "is required"}, {45, "sites[1].nodeCIDRs", "duplicate field"}}},
		{"duplicate gateway", map[int]string{33: "      - name: gw-a1"},
			[]want{{33, "sites[0].gateways[1].name", `duplicate gateway name "gw-a1" in site "a" (also sites[0].gateways[0].name, line 29)`}}},
		{"same gateway name in two sites is fine", map[int]string{51: "      - name: gw-a1"}, nil},
		{"public key missing", map[int]string{32: ""},
			[]want{{29, "sites[0].gateways[0].publicKey", "is required"}}},
		{"public key not base64", map[int]string{32: "        publicKey: abc"},
			[]want{{32, "sites[0].gateways[0].publicKey", `"abc" is not valid base64`}}},
		{"public key short", map[int]string{32: "        publicKey: AAAA"},
			[]want{{32, "sites[0].gateways[0].publicKey", "decodes to 3 bytes, want 32"}}},
		{"public key zero", map[int]string{32: "        publicKey: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
			[]want{{32, "sites[0].gateways[0].publicKey", "all-zero"}}},
		{"public key low order", map[int]string{32: "        publicKey: AQAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
			[]want{{32, "sites[0].gateways[0].publicKey", "low-order point"}}},
		{"public key shared", map[int]string{54: "        publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4="},
			[]want{{54, "sites[1].gateways[0].publicKey", "same key as sites[0].gateways[0].publicKey (line 32)"}}},
		// A gateway without endpoint is behind NAT (hubs.go).
		{"endpoint missing", map[int]string{31: ""}, nil},
		{"endpoint without port", map[int]string{31: "        endpoint: 198.51.100.1"},
			[]want{{31, "sites[0].gateways[0].endpoint", "is not host:port"}}},
		{"endpoint bare ipv6", map[int]string{35: "        endpoint: 2001:db8::1:51820"},
			[]want{{35, "sites[0].gateways[1].endpoint", "is not host:port"}}},
		{"endpoint port 0", map[int]string{31: "        endpoint: 198.51.100.1:0"},
			[]want{{31, "sites[0].gateways[0].endpoint", "is not a port number"}}},
		{"endpoint port too big", map[int]string{31: "        endpoint: 198.51.100.1:65536"},
			[]want{{31, "sites[0].gateways[0].endpoint", "is not a port number"}}},
		{"endpoint does not resolve", map[int]string{53: "        endpoint: nx.example:51820"},
			[]want{{53, "sites[1].gateways[0].endpoint", `cannot resolve "nx.example": lookup nx.example: no such host`}}},
		{"endpoint resolves to junk", map[int]string{53: "        endpoint: junk.example:51820"},
			[]want{{53, "sites[1].gateways[0].endpoint", "has no IP addresses"}}},
		{"interface name too long", map[int]string{8: "  name: bridgehead-tunnel0"},
			[]want{{8, "interface.name", "longer than 15"}}},
		{"interface name slash", map[int]string{8: "  name: bh/0"},
			[]want{{8, "interface.name", `contains '/'`}}},
		{"interface name space", map[int]string{8: `  name: "bh 0"`},
			[]want{{8, "interface.name", `contains ' '`}}},
		{"interface name dotdot", map[int]string{8: "  name: .."},
			[]want{{8, "interface.name", "is not allowed"}}},
		{"lan interface missing", map[int]string{18: "lan: {}"},
			[]want{{18, "lan.interface", `"" is empty`}}},
		{"lan interface is the tunnel", map[int]string{18: "lan: {interface: bh0}"},
			[]want{{18, "lan.interface", "is the tunnel interface"}}},
		{"lan interface too long", map[int]string{18: "lan:\n  interface: bridgehead-lan-side"},
			[]want{{19, "lan.interface", "longer than 15"}}},
		{"lan target not an address", map[int]string{18: "lan:\n  interface: eth1\n  targets:\n  - 10.0.0.1\n  - 10.0.0.300"},
			[]want{{22, "lan.targets[1]", `"10.0.0.300" is not an IP address`}}},
		{"lan target twice", map[int]string{18: "lan:\n  interface: eth1\n  targets:\n  - 10.0.0.1\n  - 10.0.0.1"},
			[]want{{22, "lan.targets[1]", "10.0.0.1 is listed twice (also lan.targets[0])"}}},
		{"lan target multicast", map[int]string{18: "lan:\n  interface: eth1\n  targets: [224.0.0.1]"},
			[]want{{20, "lan.targets[0]", "224.0.0.1 is not a unicast address of a host on the LAN"}}},
		{"lan target timeout too short", map[int]string{18: "lan:\n  interface: eth1\n  targets: [10.0.0.1]\n  targetTimeout: 100ms"},
			[]want{{21, "lan.targetTimeout", "100ms is out of range: want 200ms to 10s (default 500ms)"}}},
		{"lan targets too many", map[int]string{18: "lan:\n  interface: eth1\n  targets: [10.0.0.1, 10.0.0.2, 10.0.0.3, 10.0.0.4, 10.0.0.5, 10.0.0.6, 10.0.0.7, 10.0.0.8, 10.0.0.9]"},
			[]want{{20, "lan.targets", "has 9 addresses; at most 8"}}},
		{"syntax error", map[int]string{8: "  name: [bh0"},
			[]want{{8, "", "invalid YAML: did not find expected ',' or ']'"}}},
		// yaml.v3 names the line where the enclosing block starts (38);
		// the error names the line with the bad indentation.
		{"bad indentation", map[int]string{42: "       address: 10.0.1.2"},
			[]want{{42, "", "invalid YAML: did not find expected '-' indicator"}}},
		{"bad indentation of a mapping key", map[int]string{31: "       endpoint: 198.51.100.1:51820"},
			[]want{{31, "", "invalid YAML: did not find expected '-' indicator"}}},
		{"mapping inside scalar", map[int]string{11: "  name: a: b"},
			[]want{{11, "", "invalid YAML: mapping values are not allowed"}}},
		{"unknown anchor", map[int]string{13: "    - *svc"},
			[]want{{13, "", "invalid YAML: unknown anchor 'svc' referenced"}}},
		{"tab indentation", map[int]string{8: "\tname: bh0"},
			[]want{{8, "", "invalid YAML"}}},
		{"two documents", map[int]string{17: "---\nsite: b"},
			[]want{{17, "", "more than one YAML document"}}},
		{"every problem at once, sorted by line", map[int]string{6: "cipher: x", 9: "  mtu: 1", 45: "    nodeCIDRs: [1.2.3.4/40]"},
			[]want{{6, "cipher", "is not a cipher"}, {9, "interface.mtu", "out of range"}, {45, "sites[1].nodeCIDRs[0]", "is not a CIDR"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := parseFixture(t, tc.repl)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("unexpected error: %v", err)
				}
				return
			}
			if err == nil || c != nil {
				t.Fatalf("got config %v, error %v; want only an error", c != nil, err)
			}
			matchErrors(t, asList(t, err), tc.want)
		})
	}
}

func TestParseDegenerate(t *testing.T) {
	tests := []struct {
		name, data string
		want       want
	}{
		{"empty", "", want{1, "", "file is empty"}},
		{"only comments", "# nothing\n", want{1, "", "file is empty"}},
		{"null document", "~\n", want{1, "", "file is empty"}},
		{"scalar document", "hello\n", want{1, "", `want a mapping, got "hello"`}},
		{"list document", "- a\n", want{1, "", "want a mapping, got a list"}},
		{"non-string key", "? [a]\n: 1\n", want{1, "", "field names must be strings"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := testLoader().parse(fixtureFile, []byte(tc.data))
			if err == nil {
				t.Fatal("no error")
			}
			// The first problem is the one asked about; later ones (site
			// missing ...) follow from it.
			l := asList(t, err).sorted()
			matchErrors(t, l[:1], []want{tc.want})
		})
	}
}

func TestErrorFormat(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string
	}{
		{"full", &Error{File: "b.yaml", Line: 12, Field: "sites[0].nodeCIDRs[1]", Msg: `"10.0.0.0/33" is not a CIDR`},
			`b.yaml:12: sites[0].nodeCIDRs[1]: "10.0.0.0/33" is not a CIDR`},
		{"no field", &Error{File: "b.yaml", Line: 3, Msg: "invalid YAML: x"}, "b.yaml:3: invalid YAML: x"},
		{"no line", &Error{File: "b.yaml", Field: "site", Msg: "m"}, "b.yaml: site: m"},
		{"no file", &Error{Line: 1, Field: "site", Msg: "m"}, "<config>:1: site: m"},
		{"list sorted by line", ErrorList{{File: "f", Line: 9, Field: "b", Msg: "2"}, nil, {File: "f", Line: 2, Field: "a", Msg: "1"}},
			"f:2: a: 1\nf:9: b: 2"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.err.Error(); got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	if ErrorList(nil).Err() != nil {
		t.Error("empty ErrorList.Err() != nil")
	}
	var e *Error
	if !errors.As(ErrorList{{Line: 4}}.Err(), &e) || e.Line != 4 {
		t.Error("errors.As does not find the *Error inside an ErrorList")
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	// IP-literal endpoints only: Load uses the real resolver.
	text := strings.Replace(readFixture(t), "gw-b.example.net", "203.0.113.7", 1)
	if err := os.WriteFile(good, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("site: [\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, path, wantErr string
	}{
		{"good", good, ""},
		{"bad names the file", bad, bad + ":"},
		{"missing", filepath.Join(dir, "nope.yaml"), "config file " + filepath.Join(dir, "nope.yaml") + " does not exist"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c, err := Load(tc.path)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				if c.Path != tc.path || c.PrivateKeyPath() != filepath.Join(dir, "gw-a1.key") {
					t.Errorf("Path %q, PrivateKeyPath %q", c.Path, c.PrivateKeyPath())
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("error %v, want it to contain %q", err, tc.wantErr)
			}
		})
	}
}

func TestHash(t *testing.T) {
	a := mustParse(t, nil)
	b := mustParse(t, map[int]string{1: "# changed comment"})
	if a.Hash() == b.Hash() {
		t.Errorf("different files, same hash %s", a.Hash())
	}
	if again := mustParse(t, nil); again.Hash() != a.Hash() {
		t.Errorf("same file, hashes %s and %s", a.Hash(), again.Hash())
	}
}

func TestHelpersOnEmptyConfig(t *testing.T) {
	var c Config
	if c.LocalSite() != nil || c.LocalGateway() != nil || c.SiteByName("") != nil || !c.ClampMSSEnabled() || c.Line("x") != 0 {
		t.Error("helpers on a zero Config do not return zero values")
	}
}

// yamlLines counts lines as YAML does: \n, \r\n and a lone \r end one.
func yamlLines(s string) int {
	return strings.Count(strings.ReplaceAll(s, "\r\n", "\n"), "\n") + strings.Count(strings.ReplaceAll(s, "\r\n", "\n"), "\r") + 1
}

func FuzzParse(f *testing.F) {
	f.Add(readFixture(f))
	f.Add("site: a\nsites: [{name: a, gateways: [{name: g}]}]\n")
	f.Add("a: &x [*x]\n")
	f.Add("interface: {mtu: auto}\n---\n")
	f.Add("sites:\n  - name: a\n    gateways:\n      - name: g\n        address: 10.0.0.1\n       endpoint: 1.2.3.4:5\n")
	f.Fuzz(func(t *testing.T, data string) {
		c, err := testLoader().parse(fixtureFile, []byte(data))
		if (c == nil) == (err == nil) {
			t.Fatalf("config %v and error %v", c != nil, err)
		}
		if err != nil {
			for _, e := range asList(t, err) {
				if e.File != fixtureFile || e.Line < 1 || e.Line > yamlLines(data) || e.Msg == "" {
					t.Fatalf("bad error %#v", e)
				}
			}
		}
	})
}
