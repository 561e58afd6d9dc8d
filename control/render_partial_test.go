package control

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/router"
)

// TestRenderPartialFailures: a gateway that cannot deliver to its own
// site says so first; a remote gateway down because it cannot deliver,
// and one that is up but MTU-degraded, say why in the state column. The
// states survive the JSON of the control socket.
func TestRenderPartialFailures(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	s := Status{
		Site: "a", Gateway: "gw-a1", Ready: false, AllSites: true,
		LAN: "LAN interface lan is down",
		Sites: []health.SiteReport{{Site: "b", Ready: true, Gateways: []health.GatewayReport{
			{Gateway: "gw-b1", State: health.StateDown},
			{Gateway: "gw-b2", State: health.StateUp},
		}}},
		Peers: []health.PeerState{
			{Site: "b", Gateway: "gw-b1", Down: true, Live: router.LivenessStats{State: router.LiveDown, Reason: router.DownCannotDeliver, CannotDeliver: true, Downs: 1}},
			{Site: "b", Gateway: "gw-b2", Live: router.LivenessStats{State: router.LiveUp, PathMTU: 1168, MTUDegraded: true}},
		},
	}
	var b strings.Builder
	Render(&b, &s, t0)
	for _, want := range []string{
		"ready:   NO, cannot deliver to this site (/readyz 503, remote gateways move its flows): LAN interface lan is down",
		"down (cannot deliver)",
		"up (MTU-degraded, path MTU 1168)",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("status lacks %q:\n%s", want, b.String())
		}
	}
	if strings.Contains(b.String(), "ready:   yes") {
		t.Errorf("status says ready with a broken LAN:\n%s", b.String())
	}
	_, path := listen(t, func() Status { return s })
	got, err := Fetch(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Peers, s.Peers) || got.LAN != s.LAN {
		t.Errorf("round trip:\n got %+v %q\nwant %+v %q", got.Peers, got.LAN, s.Peers, s.LAN)
	}
}
