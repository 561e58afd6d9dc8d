package noderoutes

import (
	"bytes"
	"flag"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"

	"github.com/bridgehead/bridgehead/internal/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

func loadCluster(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(filepath.Join("testdata", "cluster.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); problems != nil {
		t.Fatalf("test config does not pass config.Check:\n%v", problems)
	}
	return c
}

func TestRenderGolden(t *testing.T) {
	tests := []struct {
		golden, site, format string
		opts                 []Option
	}{
		{"a.ip", "a", "ip", nil},
		{"a.networkd", "a", "networkd", nil},
		{"a.netplan", "a", "netplan", nil},
		{"a.netplan-ens5", "a", "netplan", []Option{WithInterface("ens5")}},
		{"a.azure", "a", "azure", nil},
		{"a.json", "a", "json", nil},
		// The local site of the config is the default.
		{"a.ip", "", "ip", nil},
		{"c.ip", "c", "ip", nil},
		{"c.azure", "c", "azure", nil},
		{"c.json", "c", "json", nil},
		// Two gateways, no routerAddress: ECMP routes.
		{"d.ip", "d", "ip", nil},
		{"d.networkd", "d", "networkd", nil},
		{"d.json", "d", "json", nil},
	}
	c := loadCluster(t)
	for _, tc := range tests {
		t.Run(fmt.Sprintf("%s/%s/%s", tc.golden, tc.site, tc.format), func(t *testing.T) {
			var b bytes.Buffer
			if err := Render(&b, c, tc.site, tc.format, tc.opts...); err != nil {
				t.Fatal(err)
			}
			golden.Check(t, filepath.Join("testdata", tc.golden+".golden"), b.Bytes(), *update)
		})
	}
}

func TestRoutes(t *testing.T) {
	tests := []struct {
		site, via string
		want      []string
	}{
		{"a", "10.0.0.5", []string{
			"10.1.0.0/16 via 10.0.0.5 b node",
			"10.245.0.0/16 via 10.0.0.5 b pod",
			"fd00:b:1::/56 via fd00:a::11 b pod",
			"10.2.0.0/16 via 10.0.0.5 c node",
			"2001:db8:c::/64 via fd00:a::11 c node",
			"10.246.0.0/16 via 10.0.0.5 c pod",
			"10.3.0.0/16 via 10.0.0.5 d node",
			"fd00:d::/64 via fd00:a::11 d node",
			"10.247.0.0/16 via 10.0.0.5 d pod",
			"fd00:d:1::/56 via fd00:a::11 d pod",
		}},
		{"c", "10.2.0.5", []string{
			"10.0.0.0/16 via 10.2.0.5 a node",
			"fd00:a::/64 via 2001:db8:c::10 a node",
			"10.244.0.0/16 via 10.2.0.5 a pod",
			"10.1.0.0/16 via 10.2.0.5 b node",
			"10.245.0.0/16 via 10.2.0.5 b pod",
			"fd00:b:1::/56 via 2001:db8:c::10 b pod",
			"10.3.0.0/16 via 10.2.0.5 d node",
			"fd00:d::/64 via 2001:db8:c::10 d node",
			"10.247.0.0/16 via 10.2.0.5 d pod",
			"fd00:d:1::/56 via 2001:db8:c::10 d pod",
		}},
	}
	c := loadCluster(t)
	for _, tc := range tests {
		t.Run(tc.site, func(t *testing.T) {
			p, err := Routes(c, tc.site)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, r := range p.Routes {
				got = append(got, fmt.Sprintf("%s via %s %s %s", r.Destination, r.Via, r.Site, r.Kind))
			}
			if p.Site != tc.site || p.Via.String() != tc.via || strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("got site %s via %s routes\n%s\nwant site %s via %s routes\n%s",
					p.Site, p.Via, strings.Join(got, "\n"), tc.site, tc.via, strings.Join(tc.want, "\n"))
			}
		})
	}
}

// TestRoutesViaFirstGateway: without a routerAddress the first gateway
// of the destination's family is the next hop.
func TestRoutesViaFirstGateway(t *testing.T) {
	c := loadCluster(t)
	tests := []struct {
		edit func(s *config.Site)
		want string
	}{
		{func(s *config.Site) {}, "10.0.0.5"},
		{func(s *config.Site) { s.RouterAddress = config.Site{}.RouterAddress }, "10.0.0.10"},
		{func(s *config.Site) {
			s.RouterAddress = config.Site{}.RouterAddress
			s.Gateways = append(s.Gateways[1:], s.Gateways[0])
		}, "10.0.0.10"},
	}
	for i, tc := range tests {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			cc := *c
			cc.Sites = append([]config.Site(nil), c.Sites...)
			cc.Sites[0].Gateways = append([]config.Gateway(nil), c.Sites[0].Gateways...)
			tc.edit(&cc.Sites[0])
			p, err := Routes(&cc, "a")
			if err != nil {
				t.Fatal(err)
			}
			if got := p.Routes[0].Via.String(); got != tc.want {
				t.Errorf("IPv4 routes via %s, want %s", got, tc.want)
			}
		})
	}
}

func TestRenderErrors(t *testing.T) {
	tests := []struct {
		name, site, format string
		opts               []Option
		nilConfig          bool
		want               []string
	}{
		{name: "unknown format", site: "a", format: "iptables",
			want: []string{`unknown format "iptables" (want one of azure, ip, json, netplan, networkd)`}},
		{name: "unknown site", site: "zz", format: "ip",
			want: []string{`testdata/cluster.yaml: no site "zz"`}},
		{name: "no IPv6 next hop", site: "b", format: "ip",
			want: []string{
				`site "b" has no next hop of the right address family`,
				"IPv6 fd00:a::/64 (testdata/cluster.yaml:10: sites[0].nodeCIDRs[1])",
				"IPv6 2001:db8:c::/64 (testdata/cluster.yaml:36: sites[2].nodeCIDRs[1])",
			}},
		{name: "bad netplan interface", site: "a", format: "netplan", opts: []Option{WithInterface("eth0: {}")},
			want: []string{`"eth0: {}" is not an interface name`}},
		{name: "nil config", site: "a", format: "json", nilConfig: true,
			want: []string{"no config"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			c := loadCluster(t)
			if tc.nilConfig {
				c = nil
			}
			var b bytes.Buffer
			err := Render(&b, c, tc.site, tc.format, tc.opts...)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			if b.Len() != 0 {
				t.Errorf("wrote %d bytes despite the error", b.Len())
			}
		})
	}
}

func TestAzureName(t *testing.T) {
	valid := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,78}[A-Za-z0-9_]$`)
	long := strings.Repeat("s", 63)
	tests := []struct {
		r    Route
		want string
	}{
		{Route{Destination: mustPrefix(t, "10.245.0.0/16"), Site: "b", Kind: KindPod}, "bh-b-pod-10.245.0.0_16"},
		{Route{Destination: mustPrefix(t, "fd00:b:1::/56"), Site: "b", Kind: KindPod}, "bh-b-pod-fd00-b-1--_56"},
		{Route{Destination: mustPrefix(t, "10.0.0.0/8"), Site: "x y", Kind: KindNode}, "bh-x-y-node-10.0.0.0_8"},
		{Route{Destination: mustPrefix(t, "2001:db8:aaaa:bbbb:cccc:dddd::/96"), Site: long, Kind: KindNode}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.r.Destination.String(), func(t *testing.T) {
			got := azureName(tc.r)
			if !valid.MatchString(got) {
				t.Errorf("%q is not a valid Azure route name", got)
			}
			if tc.want != "" && got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}
	a := azureName(Route{Destination: mustPrefix(t, "2001:db8:aaaa:bbbb:cccc:dddd::/96"), Site: long, Kind: KindNode})
	b := azureName(Route{Destination: mustPrefix(t, "2001:db8:aaaa:bbbb:cccc:eeee::/96"), Site: long, Kind: KindNode})
	if a == b {
		t.Errorf("two long routes share the name %q", a)
	}
}

func mustPrefix(t *testing.T, s string) netip.Prefix {
	t.Helper()
	p, err := netip.ParsePrefix(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestECMPFormats: formats that cannot carry several next hops refuse an
// ECMP plan and say what to do instead.
func TestECMPFormats(t *testing.T) {
	c := loadCluster(t)
	for format, want := range map[string]string{
		"netplan": `netplan routes take one next hop, but site "d" has 2 gateways and no routerAddress for 10.0.0.0/16: use --format networkd`,
		"azure":   `azure routes take one next hop, but site "d" has 2 gateways and no routerAddress for 10.0.0.0/16: put an internal load balancer`,
	} {
		var b bytes.Buffer
		err := Render(&b, c, "d", format)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v, want %q", format, err, want)
		}
		if b.Len() != 0 {
			t.Errorf("%s: wrote %q with an error", format, b.String())
		}
	}
	p, err := Routes(c, "d")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range p.Routes {
		if len(r.Vias) != 2 || r.Via != r.Vias[0] || r.Vias[0].Is4() != r.Destination.Addr().Is4() {
			t.Errorf("route %s: via %s, vias %v", r.Destination, r.Via, r.Vias)
		}
	}
}
