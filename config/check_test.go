package config

import (
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// Private key of gw-a1 in testdata/valid.yaml, and of gw-a2.
const (
	keyA1 = "KCkqKywtLi8wMTIzNDU2Nzg5Ojs8PT4/QEFCQ0RFRkc=\n"
	keyA2 = "UFFSU1RVVldYWVpbXF1eX2BhYmNkZWZnaGlqa2xtbm8=\n"
)

type fakeInfo struct {
	mode fs.FileMode
}

func (f fakeInfo) Name() string       { return "gw-a1.key" }
func (f fakeInfo) Size() int64        { return 45 }
func (f fakeInfo) Mode() fs.FileMode  { return f.mode }
func (f fakeInfo) ModTime() time.Time { return time.Time{} }
func (f fakeInfo) IsDir() bool        { return f.mode.IsDir() }
func (f fakeInfo) Sys() any           { return nil }

// keyFile describes the private key file Check sees.
type keyFile struct {
	data    string
	mode    fs.FileMode
	missing bool
	skip    bool
}

func (k keyFile) options(t *testing.T) CheckOptions {
	if k.skip {
		return CheckOptions{SkipPrivateKey: true}
	}
	data, mode := k.data, k.mode
	if data == "" {
		data = keyA1
	}
	if mode == 0 {
		mode = 0o600
	}
	check := func(name string) error {
		if name != "gw-a1.key" {
			t.Errorf("private key read from %q, want gw-a1.key", name)
		}
		if k.missing {
			return &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
		}
		return nil
	}
	return CheckOptions{
		Stat: func(name string) (fs.FileInfo, error) {
			if err := check(name); err != nil {
				return nil, err
			}
			return fakeInfo{mode}, nil
		},
		ReadFile: func(name string) ([]byte, error) {
			if err := check(name); err != nil {
				return nil, err
			}
			return []byte(data), nil
		},
	}
}

func TestCheck(t *testing.T) {
	tests := []struct {
		name     string
		repl     map[int]string
		key      keyFile
		problems []want
		warnings []want
	}{
		{name: "valid fixture"},
		{name: "valid fixture, key checks off", key: keyFile{skip: true, missing: true}},

		// checkHostBits
		{name: "host bits in a site CIDR", repl: map[int]string{25: "      - 10.244.1.0/16"},
			problems: []want{{25, "sites[0].podCIDRs[0]", "10.244.1.0/16 has host bits set; did you mean 10.244.0.0/16?"}}},
		{name: "host bits in a node pod CIDR", repl: map[int]string{40: "        podCIDR: 10.244.1.1/24"},
			problems: []want{{40, "sites[0].nodes[0].podCIDR", "did you mean 10.244.1.0/24?"}}},
		{name: "host bits in IPv6", repl: map[int]string{49: "      - fd00:b:1::1/56"},
			problems: []want{{49, "sites[1].podCIDRs[1]", "did you mean fd00:b:1::/56?"}}},

		// checkOverlaps
		{name: "pod CIDRs of two sites overlap", repl: map[int]string{48: "      - 10.244.128.0/17"},
			problems: []want{{48, "sites[1].podCIDRs[0]", "10.244.128.0/17 overlaps sites[0].podCIDRs[0] 10.244.0.0/16 (line 25)"}}},
		{name: "pod CIDRs of one site overlap", repl: map[int]string{25: "      - 10.244.0.0/16\n      - 10.244.3.0/24"},
			problems: []want{{26, "sites[0].podCIDRs[1]", "overlaps sites[0].podCIDRs[0] 10.244.0.0/16 (line 25)"}}},
		{name: "node CIDR overlaps pod CIDR of another site", repl: map[int]string{49: "      - 10.0.200.0/24"},
			problems: []want{{49, "sites[1].podCIDRs[1]", "overlaps sites[0].nodeCIDRs[0] 10.0.0.0/16 (line 22)"}}},
		{name: "IPv6 overlap", repl: map[int]string{49: "      - fd00:a::/56"},
			problems: []want{{49, "sites[1].podCIDRs[1]", "overlaps sites[0].nodeCIDRs[1] fd00:a::/64 (line 23)"}}},
		{name: "service CIDR overlaps two sites", repl: map[int]string{13: "    - 10.0.0.0/15", 14: ""},
			problems: []want{
				{13, "cluster.serviceCIDRs[0]", "overlaps sites[0].nodeCIDRs[0] 10.0.0.0/16 (line 22)"},
				{13, "cluster.serviceCIDRs[0]", "overlaps sites[1].nodeCIDRs[0] 10.1.0.0/16 (line 45)"},
			}},

		// checkReserved
		{name: "pod CIDR in AKS reserved range", repl: map[int]string{49: "      - 169.254.0.0/17"},
			problems: []want{{49, "sites[1].podCIDRs[1]", "overlaps 169.254.0.0/16, which AKS reserves (169.254.0.0/16, 172.30.0.0/16, 172.31.0.0/16 and 192.0.2.0/24 may not hold node, pod or service CIDRs); use another private range, such as 10.2.0.0/17 (free in this plan)"}}},
		{name: "service CIDR covers AKS reserved range", repl: map[int]string{13: "    - 172.16.0.0/12", 14: ""},
			problems: []want{
				{13, "cluster.serviceCIDRs[0]", "overlaps 172.30.0.0/16"},
				{13, "cluster.serviceCIDRs[0]", "overlaps 172.31.0.0/16"},
			}},
		{name: "TEST-NET-1 reserved", repl: map[int]string{48: "      - 192.0.2.128/25"},
			problems: []want{{48, "sites[1].podCIDRs[0]", "overlaps 192.0.2.0/24"}}},

		// checkDNSServiceIP
		{name: "dns service IP outside service CIDRs", repl: map[int]string{14: "  dnsServiceIP: 10.97.0.10"},
			problems: []want{{14, "cluster.dnsServiceIP", "10.97.0.10 is not inside cluster.serviceCIDRs [10.96.0.0/16]"}}},
		{name: "dns service IP without service CIDRs", repl: map[int]string{12: "  serviceCIDRs: []", 13: ""},
			problems: []want{{14, "cluster.dnsServiceIP", "cluster.serviceCIDRs is empty"}}},

		// checkSiteGateways
		{name: "site without gateways", repl: map[int]string{50: "    gateways: []", 51: "", 52: "", 53: "", 54: ""},
			problems: []want{{50, "sites[1].gateways", `site "b" has no gateways`}}},
		{name: "site without CIDRs", repl: map[int]string{45: "", 46: "", 47: "", 48: "", 49: "", 52: ""},
			problems: []want{{51, "sites[1].gateways[0].address", "is required"}},
			warnings: []want{
				{44, "sites[1]", `site "b" has no nodeCIDRs and no podCIDRs`},
				{44, "sites[1]", `site "b" has no IPv4 next hop`},
				{44, "sites[1]", `site "b" has no IPv6 next hop`},
			}},

		// checkGatewayAddresses
		{name: "gateway address outside node CIDRs", repl: map[int]string{52: "        address: 10.2.0.10"},
			problems: []want{{52, "sites[1].gateways[0].address", `10.2.0.10 is not inside the nodeCIDRs of site "b" [10.1.0.0/16 fd00:b::/64]`}}},
		{name: "gateway address in a pod CIDR", repl: map[int]string{52: "        address: 10.245.0.10"},
			problems: []want{{52, "sites[1].gateways[0].address", "is not inside the nodeCIDRs"}}},
		{name: "gateway address missing", repl: map[int]string{52: ""},
			problems: []want{{51, "sites[1].gateways[0].address", "is required"}},
			warnings: []want{{44, "sites[1]", `site "b" has no IPv4 next hop (routerAddress/address) for its nodes' routes to IPv4 CIDRs such as sites[0].nodeCIDRs[0] 10.0.0.0/16 (line 22) of site "a": ` + "`bridgehead routes -site b` fails"}}},

		// checkNodes
		{name: "node pod CIDR outside site pod CIDRs", repl: map[int]string{43: "        podCIDR: 10.245.2.0/24"},
			problems: []want{{43, "sites[0].nodes[1].podCIDR", `10.245.2.0/24 is not inside the podCIDRs of site "a" [10.244.0.0/16]`}}},
		{name: "node pod CIDR larger than site pod CIDR", repl: map[int]string{43: "        podCIDR: 10.244.0.0/15"},
			problems: []want{
				{43, "sites[0].nodes[1].podCIDR", "is not inside the podCIDRs"},
				{43, "sites[0].nodes[1].podCIDR", "overlaps sites[0].nodes[0].podCIDR 10.244.1.0/24 (line 40)"},
			}},
		{name: "node pod CIDRs overlap", repl: map[int]string{43: "        podCIDR: 10.244.1.128/25"},
			problems: []want{{43, "sites[0].nodes[1].podCIDR", "10.244.1.128/25 overlaps sites[0].nodes[0].podCIDR 10.244.1.0/24 (line 40)"}}},
		{name: "node address outside node CIDRs", repl: map[int]string{42: "        address: 10.1.1.2"},
			problems: []want{{42, "sites[0].nodes[1].address", `10.1.1.2 is not inside the nodeCIDRs of site "a"`}}},
		{name: "duplicate node name", repl: map[int]string{41: "      - name: a-node1"},
			problems: []want{{41, "sites[0].nodes[1].name", `duplicate node name "a-node1" in site "a" (also sites[0].nodes[0].name, line 38)`}}},
		{name: "node fields missing", repl: map[int]string{41: "      - {}", 42: "", 43: ""},
			problems: []want{
				{41, "sites[0].nodes[1].name", "is required"},
				{41, "sites[0].nodes[1].address", "is required"},
				{41, "sites[0].nodes[1].podCIDR", "is required"},
			}},

		// checkRouterAddress and checkSelfRoute
		{name: "router address outside node CIDRs", repl: map[int]string{26: "    routerAddress: 10.9.0.5"},
			problems: []want{{26, "sites[0].routerAddress", `10.9.0.5 is not inside the nodeCIDRs of site "a"`}}},
		{name: "router address in another site", repl: map[int]string{26: "    routerAddress: 10.1.0.5"},
			problems: []want{
				{26, "sites[0].routerAddress", "is not inside the nodeCIDRs"},
				{26, "sites[0].routerAddress", "10.1.0.5 is inside sites[1].nodeCIDRs[0] 10.1.0.0/16 (line 45) of another site"},
			}},
		{name: "listen address in another site", repl: map[int]string{5: "listen: 10.245.0.1:51820"},
			problems: []want{{5, "listen", "is inside sites[1].podCIDRs[0] 10.245.0.0/16 (line 48)"}}},
		{name: "local gateway address in another site", repl: map[int]string{30: "        address: 10.1.0.9"},
			problems: []want{
				{30, "sites[0].gateways[0].address", "is not inside the nodeCIDRs"},
				{30, "sites[0].gateways[0].address", "would route its own traffic into the tunnel"},
			}},

		// checkEndpoints
		{name: "remote endpoint routed into the tunnel", repl: map[int]string{53: "        endpoint: 10.1.0.10:51820"},
			warnings: []want{{53, "sites[1].gateways[0].endpoint", "10.1.0.10 is inside sites[1].nodeCIDRs[0] 10.1.0.0/16 (line 45), which is routed into the tunnel"}}},
		{name: "remote endpoint of the other family", repl: map[int]string{53: "        endpoint: '[2001:db8::9]:51820'"},
			warnings: []want{{53, "sites[1].gateways[0].endpoint", "cannot be reached from listen address 0.0.0.0:51820"}}},
		{name: "dual-stack listener reaches both families", repl: map[int]string{5: "listen: '[::]:51820'", 53: "        endpoint: '[2001:db8::9]:51820'"}},

		// checkPrivateKey
		{name: "private key of another gateway", key: keyFile{data: keyA2},
			problems: []want{{4, "privateKeyFile", "has public key OS0XSjizsb6vrx/oJIcIQcX6UxvG6v22QCwSRmRIjBw=, but sites[0].gateways[0].publicKey (line 32) is SS8c"}}},
		{name: "private key file missing", key: keyFile{missing: true},
			problems: []want{{4, "privateKeyFile", "gw-a1.key does not exist"}}},
		{name: "private key file garbage", key: keyFile{data: "not a key"},
			problems: []want{{4, "privateKeyFile", "the key in gw-a1.key is not valid base64"}}},
		{name: "private key all zero", key: keyFile{data: "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="},
			problems: []want{{4, "privateKeyFile", "is the all-zero key"}}},
		{name: "private key file is a directory", key: keyFile{mode: fs.ModeDir | 0o700},
			problems: []want{{4, "privateKeyFile", "is not a regular file"}}},
		{name: "private key file readable by others", key: keyFile{mode: 0o644},
			problems: []want{{4, "privateKeyFile", "has mode 0644: group or others can access the private key; run chmod 600 gw-a1.key"}}},
		{name: "private key file readable by group", key: keyFile{mode: 0o640},
			problems: []want{{4, "privateKeyFile", "has mode 0640: group or others can access the private key; run chmod 600 gw-a1.key"}}},
		{name: "private key file 0400", key: keyFile{mode: 0o400}},
		{name: "private key mode not checked with SkipPrivateKey", key: keyFile{mode: 0o644, skip: true}},
		{name: "private key file not set", repl: map[int]string{4: ""},
			problems: []want{{2, "privateKeyFile", "is required"}}},

		{name: "every problem at once",
			repl: map[int]string{14: "  dnsServiceIP: 10.97.0.10", 25: "      - 10.244.1.0/16", 52: "        address: 10.2.0.10"},
			key:  keyFile{mode: 0o640},
			problems: []want{
				{4, "privateKeyFile", "mode 0640"},
				{14, "cluster.dnsServiceIP", "not inside"},
				{25, "sites[0].podCIDRs[0]", "host bits"},
				{52, "sites[1].gateways[0].address", "not inside"},
			}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := mustParse(t, tc.repl)
			problems, warnings := Check(c, tc.key.options(t))
			matchErrors(t, problems, tc.problems)
			matchErrors(t, warnings, tc.warnings)
			if len(tc.problems) == 0 && problems != nil {
				t.Error("problems is an empty, non-nil list")
			}
		})
	}
}

// TestCheckHandBuilt checks a Config not made by Parse: no lines, no
// panics, problems still named by field.
func TestCheckHandBuilt(t *testing.T) {
	tests := []struct {
		name string
		c    *Config
		want string
	}{
		{"nil", nil, "<config>: no config"},
		{"zero", &Config{Path: "x.yaml"}, "x.yaml: privateKeyFile: is required: the file holding this gateway's private key"},
		{"site with bad gateway", &Config{Path: "x.yaml", Site: "a", Sites: []Site{{Name: "a", Gateways: []Gateway{{}}}}},
			"x.yaml: sites[0].gateways[0].address: is required: the gateway's address in its site's node network\n" +
				"x.yaml: privateKeyFile: is required: the file holding this gateway's private key\n" +
				"x.yaml: sites[0]: site \"a\" has no nodeCIDRs and no podCIDRs: nothing is routed to it"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			problems, warnings := Check(tc.c, CheckOptions{})
			got := append(problems, warnings...).Error()
			if got != tc.want {
				t.Errorf("got\n%s\nwant\n%s", got, tc.want)
			}
		})
	}
}

// TestCheckIPv6NextHops covers the dual-stack fields: address6,
// routerAddress6 and a node's address6/podCIDR6.
func TestCheckIPv6NextHops(t *testing.T) {
	base := func() *Config {
		return &Config{
			Path: "t.yaml", Site: "a", Gateway: "gw",
			Sites: []Site{{
				Name:      "a",
				NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.224.0.0/16"), netip.MustParsePrefix("fd00:224::/64")},
				PodCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")},
				Gateways:  []Gateway{{Name: "gw", Address: netip.MustParseAddr("10.224.0.4"), Address6: netip.MustParseAddr("fd00:224::4")}},
				Nodes: []Node{
					{Name: "n1", Address: netip.MustParseAddr("10.224.0.5"), PodCIDR: netip.MustParsePrefix("10.244.1.0/24"),
						Address6: netip.MustParseAddr("fd00:224::5"), PodCIDR6: netip.MustParsePrefix("fd00:244:0:1::/64")},
				},
			}},
		}
	}
	cases := []struct {
		name  string
		edit  func(c *Config)
		field string // "" means no problem expected among these fields
	}{
		{"valid", func(*Config) {}, ""},
		{"gateway address6 outside node CIDRs", func(c *Config) { c.Sites[0].Gateways[0].Address6 = netip.MustParseAddr("fd00:999::4") }, "sites[0].gateways[0].address6"},
		{"gateway address6 is IPv4", func(c *Config) { c.Sites[0].Gateways[0].Address6 = netip.MustParseAddr("10.224.0.9") }, "sites[0].gateways[0].address6"},
		{"routerAddress6 outside", func(c *Config) { c.Sites[0].RouterAddress6 = netip.MustParseAddr("fd00:1::1") }, "sites[0].routerAddress6"},
		{"node podCIDR6 outside pod CIDRs", func(c *Config) { c.Sites[0].Nodes[0].PodCIDR6 = netip.MustParsePrefix("fd00:999::/64") }, "sites[0].nodes[0].podCIDR6"},
		{"node podCIDR6 without address6", func(c *Config) { c.Sites[0].Nodes[0].Address6 = netip.Addr{} }, "sites[0].nodes[0].podCIDR6"},
		{"node podCIDR6 overlap", func(c *Config) {
			n := c.Sites[0].Nodes[0]
			n.Name, n.Address, n.PodCIDR, n.Address6 = "n2", netip.MustParseAddr("10.224.0.6"), netip.MustParsePrefix("10.244.2.0/24"), netip.MustParseAddr("fd00:224::6")
			c.Sites[0].Nodes = append(c.Sites[0].Nodes, n)
		}, "sites[0].nodes[1].podCIDR6"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := base()
			tc.edit(c)
			problems, _ := Check(c, CheckOptions{SkipPrivateKey: true})
			found := false
			for _, p := range problems {
				if strings.Contains(p.Field, "address6") || strings.Contains(p.Field, "6") {
					if tc.field == "" {
						t.Errorf("unexpected problem: %v", p)
					}
					if p.Field == tc.field {
						found = true
					}
				}
			}
			if tc.field != "" && !found {
				t.Errorf("no problem reported for %s; got %v", tc.field, problems)
			}
		})
	}
}

// TestCheckFileReportsEverything: a file with a decoding mistake and an
// address-plan mistake gets both reported, each once.
func TestCheckFileReportsEverything(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/bad.yaml"
	data := `site: a
gateway: gw-a1
privateKeyFile: k
interfaces: {name: bh0}
sites:
  - name: a
    nodeCIDRs: [10.1.0.0/16]
    podCIDRs: [10.2.0.0/16, 10.0.0.0/33]
    gateways:
      - {name: gw-a1, address: 10.1.0.4, endpoint: 192.0.2.10:51820, publicKey: "+8LmPyXzYa4l3t2q8oB9W2nH4M7xXyR0Qd4C5sQ1U0Y="}
  - name: b
    nodeCIDRs: [10.1.128.0/17]
    podCIDRs: [10.3.0.0/16]
    gateways:
      - {name: gw-b1, address: 10.1.128.4, endpoint: 192.0.2.11:51820, publicKey: "b2x6q0Q6S3kq5y0l0Zb7nQ8aW1r4fV2cX9uT3jK5mHE="}
`
	if err := os.WriteFile(path, []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	c, problems, _, err := CheckFile(path, CheckOptions{SkipPrivateKey: true})
	if err != nil || c != nil {
		t.Fatalf("CheckFile: config %v, err %v", c, err)
	}
	var text []string
	for _, p := range problems {
		text = append(text, p.Error())
	}
	all := strings.Join(text, "\n")
	for _, want := range []string{`:4: interfaces`, `podCIDRs[1]`, `overlaps`} {
		if !strings.Contains(all, want) {
			t.Errorf("problems lack %q:\n%s", want, all)
		}
	}
	seen := map[string]bool{}
	for _, l := range text {
		if seen[l] {
			t.Errorf("reported twice: %s", l)
		}
		seen[l] = true
	}
}

// TestCheckSitePodCIDRsMissing: a misspelled site-level podCIDRs gets its
// "did you mean" alone, not a problem per node about empty podCIDRs; a
// site with none at all gets one problem at the site.
func TestCheckSitePodCIDRsMissing(t *testing.T) {
	raw, err := os.ReadFile("testdata/valid.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// No name resolution in this test: the one host name becomes an address.
	lines := strings.Split(strings.ReplaceAll(string(raw), "gw-b.example.net:", "203.0.113.9:"), "\n")
	if lines[23] != "    podCIDRs:" || lines[24] != "      - 10.244.0.0/16" {
		t.Fatalf("testdata/valid.yaml changed: lines 24-25 are %q, %q", lines[23], lines[24])
	}
	for _, tc := range []struct {
		name string
		edit func([]string) []string
		want []string // each problem's "line: field: message" after the file name
	}{
		{"misspelled", func(l []string) []string { l[23] = "    podCIDR:"; return l },
			[]string{`24: sites[0].podCIDR: unknown field (did you mean "podCIDRs"?)`}},
		{"absent", func(l []string) []string { return append(l[:23:23], l[25:]...) },
			[]string{`20: sites[0].podCIDRs: missing: the nodes of site "a" have podCIDRs, which must be inside the site's podCIDRs`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "c.yaml")
			if err := os.WriteFile(path, []byte(strings.Join(tc.edit(slices.Clone(lines)), "\n")), 0o600); err != nil {
				t.Fatal(err)
			}
			_, problems, _, err := CheckFile(path, CheckOptions{SkipPrivateKey: true})
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, p := range problems {
				got = append(got, strings.TrimPrefix(p.Error(), path+":"))
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
		})
	}
}
