package control

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/transit"
)

// TestRenderPath: the PATH column says direct for a gateway reached
// directly (with its endpoint) and which hub gateways carry the flows
// of one reached through a hub (no endpoint: it has none of its own);
// a daemon that does not say which still shows "via hub".
func TestRenderPath(t *testing.T) {
	direct := netip.MustParseAddrPort("203.0.113.1:51820")
	s := Status{
		Site: "e1", Gateway: "gw-e1", Ready: true, AllSites: true,
		Sites: []health.SiteReport{
			{Site: "a", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-a", State: health.StateUp}}},
			{Site: "e2", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-e2", State: health.StateUp}}},
			{Site: "e3", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-e3", State: health.StateUp}}},
			{Site: "e4", Ready: true, Gateways: []health.GatewayReport{{Gateway: "gw-e4", State: health.StateUp}}},
		},
		Peers: []health.PeerState{
			{Site: "a", Gateway: "gw-a", Endpoint: direct, Path: health.PathDirect},
			{Site: "e2", Gateway: "gw-e2", Endpoint: transit.PseudoEndpoint(2), Path: health.PathHub, Via: []string{"a/gw-a", "a/gw-b"}},
			{Site: "e3", Gateway: "gw-e3", Endpoint: transit.PseudoEndpoint(3)},
			{Site: "e4", Gateway: "gw-e4", Endpoint: transit.PseudoEndpoint(4), Path: health.PathHub},
		},
	}
	var b strings.Builder
	Render(&b, &s, time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC))
	want := map[string]string{
		"gw-a":  direct.String() + " direct up",
		"gw-e2": "- via hub a/gw-a, a/gw-b up",
		"gw-e3": "- via hub up",
		"gw-e4": "- via hub (no session) up",
	}
	for _, line := range strings.Split(b.String(), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		if w, ok := want[f[1]]; ok {
			if got := strings.Join(f[2:2+len(strings.Fields(w))], " "); got != w {
				t.Errorf("%s: %q, want %q", f[1], got, w)
			}
			delete(want, f[1])
		}
	}
	if len(want) > 0 {
		t.Errorf("no line for %v:\n%s", want, b.String())
	}
}
