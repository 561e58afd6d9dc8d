package verify

import (
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/health"
)

// TestRemoteGatewayPath: the remote-gateway check names the path the
// running gateway uses to it, direct or through which hub gateways.
func TestRemoteGatewayPath(t *testing.T) {
	for _, tc := range []struct {
		path string
		via  []string
		want string
	}{
		{health.PathDirect, nil, "direct, rtt"},
		{health.PathHub, []string{"hub/gw-h1", "hub/gw-h2"}, "via hub hub/gw-h1, hub/gw-h2, rtt"},
		{"", nil, "ago, rtt"}, // a daemon that does not say
	} {
		cfg := labCfg(t)
		st := healthyStatus(cfg)
		st.Peers[0].Path, st.Peers[0].Via = tc.path, tc.via
		rep := runWith(t, cfg, healthyNet(), st)
		chk := find(rep, "remote-gateway")
		if len(chk) != 1 || chk[0].Result != Pass || !strings.Contains(chk[0].Figure, tc.want) {
			t.Errorf("path %q via %v: %+v, want figure with %q", tc.path, tc.via, chk, tc.want)
		}
	}
}
