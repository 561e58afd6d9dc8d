package daemon

import (
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/transit"
)

// fakePaths relays to every pseudo endpoint through the hub gateways in
// via, except to pseudo endpoint direct, which it reaches at directAt.
type fakePaths struct {
	via      []transit.Gateway
	direct   netip.AddrPort
	directAt netip.AddrPort
}

func (f fakePaths) Direct(ep netip.AddrPort) (netip.AddrPort, bool) {
	return f.directAt, ep == f.direct && f.direct.IsValid()
}

func (f fakePaths) Via(ep netip.AddrPort) ([]transit.Gateway, bool) {
	if _, ok := transit.PseudoGateway(ep); !ok {
		return nil, false
	}
	return f.via, true
}

// TestPaths: status and metrics say direct for a gateway with a real
// endpoint and name the hub gateways of one reached through a hub, one
// series per remote gateway and path (not per flow).
func TestPaths(t *testing.T) {
	peers := func() []health.PeerState {
		return withPaths([]health.PeerState{
			{Site: "a", Gateway: "gw-a1", Endpoint: netip.MustParseAddrPort("203.0.113.1:51820")},
			{Site: "e2", Gateway: "gw-e2", Endpoint: transit.PseudoEndpoint(3)},
			{Site: "e3", Gateway: "gw-e3", Endpoint: transit.PseudoEndpoint(4)},
		}, fakePaths{via: []transit.Gateway{{Site: "a", Name: "gw-a1"}, {Site: "a", Name: "gw-a2"}},
			direct: transit.PseudoEndpoint(4), directAt: netip.MustParseAddrPort("203.0.113.13:40000")})
	}
	got := peers()
	if got[0].Path != health.PathDirect || got[0].Via != nil {
		t.Errorf("direct peer: path %q via %v", got[0].Path, got[0].Via)
	}
	if got[1].Path != health.PathHub || !slices.Equal(got[1].Via, []string{"a/gw-a1", "a/gw-a2"}) {
		t.Errorf("relayed peer: path %q via %v", got[1].Path, got[1].Via)
	}
	if got[2].Path != health.PathDirect || got[2].DirectAt != "203.0.113.13:40000" || got[2].Via != nil {
		t.Errorf("hole-punched peer: path %q at %q via %v", got[2].Path, got[2].DirectAt, got[2].Via)
	}
	if p := withPaths([]health.PeerState{{Endpoint: transit.PseudoEndpoint(3)}}, nil); p[0].Path != health.PathDirect {
		t.Errorf("no relay path: %q", p[0].Path)
	}
	want := `
# HELP bridgehead_peer_path 1 for the path datagrams to a remote gateway take now: direct, or hub (relayed through a hub site, see bridgehead_peer_via_hub); 0 for the other. bridgehead_peer_probe_rtt_seconds is measured along it.
# TYPE bridgehead_peer_path gauge
bridgehead_peer_path{gateway="gw-a1",path="direct",site="a"} 1
bridgehead_peer_path{gateway="gw-a1",path="hub",site="a"} 0
bridgehead_peer_path{gateway="gw-e2",path="direct",site="e2"} 0
bridgehead_peer_path{gateway="gw-e2",path="hub",site="e2"} 1
bridgehead_peer_path{gateway="gw-e3",path="direct",site="e3"} 1
bridgehead_peer_path{gateway="gw-e3",path="hub",site="e3"} 0
# HELP bridgehead_peer_via_hub 1 for each hub gateway that carries flows to a remote gateway reached through a hub (a relayed flow takes one of them by its hash).
# TYPE bridgehead_peer_via_hub gauge
bridgehead_peer_via_hub{gateway="gw-e2",hub_gateway="gw-a1",hub_site="a",site="e2"} 1
bridgehead_peer_via_hub{gateway="gw-e2",hub_gateway="gw-a2",hub_site="a",site="e2"} 1
`
	if err := testutil.CollectAndCompare(newPathCollector(peers), strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
