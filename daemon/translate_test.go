package daemon

import (
	"net/netip"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/transit"
)

// TestNATKeepalive: a gateway behind NAT keeps its sessions toward
// gateways with an endpoint open with keepalives of at most
// transit.NATKeepalive; nothing else changes.
func TestNATKeepalive(t *testing.T) {
	const (
		keyA = "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="
		keyB = "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="
		keyC = "4Uv6D/dIndy4UDhhCCFQpyOzELD5xZODaCGabWoj0H0="
	)
	catalog := func(local string, siteKeepalive time.Duration) *config.Config {
		return &config.Config{Site: local, Gateway: "gw", Sites: []config.Site{
			{Name: "a", Keepalive: siteKeepalive, Gateways: []config.Gateway{{Name: "gw", Endpoint: "203.0.113.1:51820", PublicKey: keyA}}},
			{Name: "e1", Keepalive: siteKeepalive, Gateways: []config.Gateway{{Name: "gw", PublicKey: keyB}}},
			{Name: "e2", Keepalive: siteKeepalive, Gateways: []config.Gateway{{Name: "gw", PublicKey: keyC}}},
		}}
	}
	for _, tc := range []struct {
		name  string
		local string
		site  time.Duration
		want  map[string]time.Duration // by remote site
	}{
		{"behind NAT, no keepalive set", "e1", 0, map[string]time.Duration{"a": transit.NATKeepalive, "e2": 0}},
		{"behind NAT, a longer one set", "e1", time.Minute, map[string]time.Duration{"a": transit.NATKeepalive, "e2": time.Minute}},
		{"behind NAT, a shorter one set", "e1", 5 * time.Second, map[string]time.Duration{"a": 5 * time.Second, "e2": 5 * time.Second}},
		{"public gateway", "a", 0, map[string]time.Duration{"e1": 0, "e2": 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rc, err := routerConfig(catalog(tc.local, tc.site))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range rc.Sites {
				if s.Name == tc.local {
					continue
				}
				if got := s.Gateways[0].Keepalive; got != tc.want[s.Name] {
					t.Errorf("keepalive toward %s: %v, want %v", s.Name, got, tc.want[s.Name])
				}
			}
		})
	}
}

// TestTransitPlanEndpoints: the relay plan carries each gateway's
// configured endpoint, which transit uses to refuse a hub's hint naming
// another gateway's endpoint; a gateway without one has none.
func TestTransitPlanEndpoints(t *testing.T) {
	const (
		keyA = "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="
		keyB = "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="
		keyC = "4Uv6D/dIndy4UDhhCCFQpyOzELD5xZODaCGabWoj0H0="
	)
	epA := netip.MustParseAddrPort("203.0.113.1:51820")
	c := &config.Config{Site: "e1", Gateway: "gw", Sites: []config.Site{
		{Name: "a", Gateways: []config.Gateway{{Name: "gw", Endpoint: epA.String(), EndpointAddr: epA, PublicKey: keyA}}},
		{Name: "e1", Gateways: []config.Gateway{{Name: "gw", PublicKey: keyB}}},
		{Name: "e2", Gateways: []config.Gateway{{Name: "gw", PublicKey: keyC}}},
	}}
	plan, self, err := transitPlan(c)
	if err != nil {
		t.Fatal(err)
	}
	if self != 1 {
		t.Errorf("self %d, want 1", self)
	}
	want := []netip.AddrPort{epA, {}, {}}
	for id := range plan.Len() {
		if got := plan.Gateway(transit.GatewayID(id)).Endpoint; got != want[id] {
			t.Errorf("gateway %d (%s): endpoint %v, want %v", id, plan.Gateway(transit.GatewayID(id)).Site, got, want[id])
		}
	}
}
