package config

import (
	"strings"
	"testing"
)

func TestParseSites(t *testing.T) {
	good := `sites:
  - name: a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.224.0.4, endpoint: 198.51.100.1:51820, publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=}
    nodes:
      - {name: a1, address: 10.224.0.11, podCIDR: 10.244.1.0/24}
relay: {listen: 10.224.0.4:8131}
`
	for _, tc := range []struct {
		name, data, want string
	}{
		{"good", good, ""},
		{"no sites", "relay: {}\n", "catalog.yaml:1: sites: the catalog lists no sites"},
		{"unknown field", strings.Replace(good, "nodeCIDRs", "nodeCIDR", 1), `catalog.yaml:3: sites[0].nodeCIDR: unknown field (did you mean "nodeCIDRs"?)`},
		{"bad key", strings.Replace(good, "SS8cuFhH", "xx", 1), "catalog.yaml:6: sites[0].gateways[0].publicKey"},
		{"not yaml", "sites: [", "catalog.yaml"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := ParseSites("catalog.yaml", []byte(tc.data))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				if len(c.Sites) != 1 || len(c.Sites[0].Nodes) != 1 || c.Site != "" {
					t.Errorf("sites %+v", c.Sites)
				}
				if problems, _ := Check(c, CheckOptions{SkipPrivateKey: true}); len(problems) > 0 {
					t.Errorf("Check: %v", problems)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("err %v, want %q", err, tc.want)
			}
		})
	}
}
