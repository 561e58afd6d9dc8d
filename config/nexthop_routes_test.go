package config_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// TestNextHopWarningMatchesRoutes keeps check and `bridgehead routes` in
// step (issue #13, item 6): check warns about a site exactly when
// noderoutes refuses to compute that site's routes.
func TestNextHopWarningMatchesRoutes(t *testing.T) {
	const keyA = "SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4="
	const keyB = "fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M="
	site := func(name, nodes, pods, extra, gwAddrs, key, ep string) string {
		return fmt.Sprintf("  - name: %s\n    nodeCIDRs: [%s]\n    podCIDRs: [%s]\n%s    gateways:\n      - {name: gw, %s, endpoint: %s, publicKey: %s}\n",
			name, nodes, pods, extra, gwAddrs, ep, key)
	}
	tests := []struct {
		name string
		a, b string
	}{
		{"both IPv4 only",
			site("a", "10.0.0.0/16", "10.244.0.0/16", "", "address: 10.0.0.4", keyA, "192.0.2.1:51820"),
			site("b", "10.1.0.0/16", "10.245.0.0/16", "", "address: 10.1.0.4", keyB, "192.0.2.2:51820")},
		{"b has IPv6 pods, a no IPv6 next hop",
			site("a", "10.0.0.0/16", "10.244.0.0/16", "", "address: 10.0.0.4", keyA, "192.0.2.1:51820"),
			site("b", "10.1.0.0/16, 'fd00:b::/64'", "10.245.0.0/16, 'fd00:245::/56'", "", "address: 10.1.0.4, address6: 'fd00:b::4'", keyB, "192.0.2.2:51820")},
		{"both dual-stack through routerAddress6",
			site("a", "10.0.0.0/16, 'fd00:a::/64'", "10.244.0.0/16", "    routerAddress6: 'fd00:a::1'\n", "address: 10.0.0.4", keyA, "192.0.2.1:51820"),
			site("b", "10.1.0.0/16, 'fd00:b::/64'", "'fd00:245::/56'", "", "address: 10.1.0.4, address6: 'fd00:b::4'", keyB, "192.0.2.2:51820")},
		{"b IPv6 only, a IPv4 only",
			site("a", "10.0.0.0/16", "10.244.0.0/16", "", "address: 10.0.0.4", keyA, "192.0.2.1:51820"),
			site("b", "'fd00:b::/64'", "'fd00:245::/56'", "", "address: 'fd00:b::4'", keyB, "192.0.2.2:51820")},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			data := "site: a\ngateway: gw\nprivateKeyFile: k\nsites:\n" + tc.a + tc.b
			c, err := config.Parse("t.yaml", []byte(data))
			if err != nil {
				t.Fatal(err)
			}
			_, warnings := config.Check(c, config.CheckOptions{SkipPrivateKey: true})
			for i, name := range []string{"a", "b"} {
				warned := false
				for _, w := range warnings {
					if w.Field == fmt.Sprintf("sites[%d]", i) && strings.Contains(w.Msg, "next hop") {
						warned = true
						if w.Line == 0 {
							t.Errorf("warning without a line: %v", w)
						}
					}
				}
				_, rerr := noderoutes.Routes(c, name)
				if warned != (rerr != nil) {
					t.Errorf("site %s: check warned %v, routes error %v\nwarnings: %v", name, warned, rerr, warnings)
				}
			}
		})
	}
}
