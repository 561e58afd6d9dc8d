package control

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/transit"
)

// TestRenderViaHub: a gateway reached through a hub (its pseudo
// endpoint) shows as "via hub", a direct one with its address.
func TestRenderViaHub(t *testing.T) {
	direct := netip.MustParseAddrPort("203.0.113.1:51820")
	s := Status{
		Site: "e1", Gateway: "gw-e1", Ready: true, AllSites: true,
		Sites: []health.SiteReport{
			{Site: "a", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-a", State: health.StateUp}}},
			{Site: "e2", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-e2", State: health.StateUp}}},
		},
		Peers: []health.PeerState{
			{Site: "a", Gateway: "gw-a", Endpoint: direct},
			{Site: "e2", Gateway: "gw-e2", Endpoint: transit.PseudoEndpoint(2)},
		},
	}
	var b strings.Builder
	Render(&b, &s, time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) > 2 && f[1] == "gw-a" && f[2] != direct.String():
			t.Errorf("direct gateway shown as %q", f[2])
		case len(f) > 3 && f[1] == "gw-e2" && (f[2] != "via" || f[3] != "hub"):
			t.Errorf("relayed gateway shown as %q", line)
		}
	}
	if !strings.Contains(b.String(), "via hub") {
		t.Errorf("status lacks via hub:\n%s", b.String())
	}
}
