package daemon

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// mtuCatalog is a catalog with two public sites (hubs by default) and
// two edge sites behind NAT (no endpoints), seen from gateway gw of site local, with
// mtu as interface.mtu ("" leaves it out).
func mtuCatalog(t *testing.T, local, mtu string) *config.Config {
	t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "site: %s\ngateway: gw\nprivateKeyFile: k\n", local)
	if mtu != "" {
		fmt.Fprintf(&b, "interface: {name: bh0, mtu: %s}\n", mtu)
	}
	b.WriteString("sites:\n")
	for i, s := range []struct{ name, endpoint, key string }{
		{"hub", "198.51.100.1:51820", "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="},
		{"hub2", "198.51.100.2:51820", "SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4="},
		{"e1", "", "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="},
		{"e2", "", "4Uv6D/dIndy4UDhhCCFQpyOzELD5xZODaCGabWoj0H0="},
	} {
		fmt.Fprintf(&b, "  - name: %s\n    nodeCIDRs: [10.%d.0.0/16]\n    podCIDRs: [10.%d.0.0/16]\n    gateways:\n      - {name: gw, address: 10.%d.0.4, publicKey: %q",
			s.name, i+1, i+101, i+1, s.key)
		if s.endpoint != "" {
			fmt.Fprintf(&b, ", endpoint: %q", s.endpoint)
		}
		b.WriteString("}\n")
	}
	c, err := config.Parse("c.yaml", []byte(b.String()))
	if err != nil {
		t.Fatalf("%v\n%s", err, b.String())
	}
	return c
}

// TestTunnelMTU: a gateway whose datagrams can go through a hub (behind
// NAT, with a hub) leaves room for the relay header in the TUN's MTU,
// which the MSS clamp follows: a full-size relayed datagram fits the same
// WAN MTU as a direct one. An interface.mtu the operator wrote is kept
// (check warns when it is too large for relayed paths).
func TestTunnelMTU(t *testing.T) {
	for _, tc := range []struct {
		name  string
		local string
		mtu   string
		want  int
	}{
		{"public gateway, default", "hub", "", config.DefaultMTU},
		{"behind NAT with a hub, default", "e1", "", config.DefaultMTU - bhcrypto.RelayOverhead},
		{"behind NAT with a hub, explicit", "e1", "1400", 1400},
		{"public gateway, explicit", "hub", "1400", 1400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tunnelMTU(mtuCatalog(t, tc.local, tc.mtu), slog.New(slog.DiscardHandler))
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("tunnel MTU %d, want %d", got, tc.want)
			}
		})
	}
	// With "auto", the same WAN path (the route to the public sites'
	// endpoints) leaves a relayed gateway the relay header less than a
	// direct one.
	direct, err := autoMTU(mtuCatalog(t, "hub", "auto"))
	if err != nil {
		t.Skipf("no route to the hub's endpoint here: %v", err)
	}
	relayed, err := autoMTU(mtuCatalog(t, "e1", "auto"))
	if err != nil {
		t.Fatal(err)
	}
	if direct-relayed != bhcrypto.RelayOverhead {
		t.Errorf("auto MTU %d behind NAT, %d for a public gateway: want %d less", relayed, direct, bhcrypto.RelayOverhead)
	}
}
