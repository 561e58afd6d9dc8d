package transit

import (
	"net/netip"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestPlanDestinationBinds: a hub relays between two gateways only if
// both their sites name its site as a hub (the destination's `via` binds
// as the source's does), and never for a gateway that has an endpoint of
// its own (every gateway reaches it directly).
func TestPlanDestinationBinds(t *testing.T) {
	key := func(seed byte) bhcrypto.PublicKey { return testIdentity(t, seed, bhcrypto.AESGCM).Public }
	ep := netip.MustParseAddrPort("198.51.100.9:51820")
	gws := []Gateway{
		{Site: "aks", Name: "h", Key: key(1), Endpoint: netip.MustParseAddrPort("198.51.100.1:51820")},
		{Site: "gke", Name: "h", Key: key(2), Endpoint: netip.MustParseAddrPort("198.51.100.2:51820")},
		{Site: "e1", Name: "a", Key: key(3)},
		{Site: "e2", Name: "a", Key: key(4)},
		{Site: "e3", Name: "a", Key: key(5)},
		{Site: "e3", Name: "pub", Key: key(6), Endpoint: ep},
	}
	const (
		aks GatewayID = iota
		gke
		e1
		e2
		e3
		e3pub
	)
	plan, err := NewPlan(gws, map[string][]string{"e1": {"aks"}, "e2": {"gke"}, "e3": {"aks", "gke"}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		hub, src, dst GatewayID
		want          bool
	}{
		{"both name the hub", aks, e1, e3, true},
		{"both name the hub, back", aks, e3, e1, true},
		{"only the source names it", gke, e3, e1, false},
		{"only the source names it, another pair", aks, e3, e2, false},
		{"only the destination names it", gke, e1, e3, false},
		{"neither shares it", aks, e1, e2, false},
		{"a destination with an endpoint", aks, e1, e3pub, false},
		{"a source with an endpoint", aks, e3pub, e1, false},
	} {
		if got := plan.Allowed(tc.hub, tc.src, tc.dst); got != tc.want {
			t.Errorf("%s: Allowed = %v, want %v", tc.name, got, tc.want)
		}
	}
	if hubs := plan.Hubs(e1, e2); len(hubs) != 0 {
		t.Errorf("e1 and e2 share no hub, yet Hubs = %v", hubs)
	}
}

// TestHubRefusesOneSidedRelay: a hub refuses a relay message toward a
// gateway whose site does not name it, however valid the sender's
// session.
func TestHubRefusesOneSidedRelay(t *testing.T) {
	w := newWorld(t, bhcrypto.AESGCM)
	hubs := map[string][]string{"e1": {"aks"}, "x": {"aks"}} // e2 no longer names aks
	var gws []Gateway
	for g := range numTestGateways {
		gws = append(gws, w.plan.Gateway(g))
	}
	plan, err := NewPlan(gws, hubs)
	if err != nil {
		t.Fatal(err)
	}
	w.relay[gwHub].SetPlan(plan, gwHub)
	msg := w.wrap(t, gwE1, gwHub, gwE2, w.e2e[0], []byte("to e2"))
	if res := w.relay[gwHub].Receive(msg); res.Reason != ReasonNotAllowed {
		t.Fatalf("the hub says %v, want %v", res.Reason, ReasonNotAllowed)
	}
}
