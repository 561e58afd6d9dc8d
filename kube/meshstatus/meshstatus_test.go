package meshstatus

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/bridgehead/bridgehead/internal/gatewaytest"
	"github.com/bridgehead/bridgehead/mesh"
)

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

func meshRow(to string, st mesh.State, p mesh.Path, rtt float64) mesh.Row {
	return mesh.Row{FromSite: "east", FromGateway: "east.gw1", To: to, State: st, Path: p,
		GatewaysUp: 3, Gateways: 3, RTTMs: rtt, MTU: 1420, Since: t0}
}

// TestDue: a change of state or path is written after MinGap; RTT,
// loss and MTU only after Refresh; nothing when nothing changed.
func TestDue(t *testing.T) {
	p := &Publisher{o: Options{Refresh: time.Minute, MinGap: 5 * time.Second}}
	base := ToAPI([]mesh.Row{meshRow("west", mesh.Up, mesh.Direct, 12)}, t0).Rows
	p.last, p.lastAt = base, t0
	cases := []struct {
		name  string
		row   mesh.Row
		after time.Duration
		due   bool
	}{
		{"same, later", meshRow("west", mesh.Up, mesh.Direct, 12), 2 * time.Minute, false},
		{"down, within MinGap", meshRow("west", mesh.Down, mesh.None, 0), 4 * time.Second, false},
		{"down, after MinGap", meshRow("west", mesh.Down, mesh.None, 0), 5 * time.Second, true},
		{"hub", meshRow("west", mesh.Up, mesh.Hub, 12), 6 * time.Second, true},
		{"RTT moved, before Refresh", meshRow("west", mesh.Up, mesh.Direct, 15), 30 * time.Second, false},
		{"RTT moved, after Refresh", meshRow("west", mesh.Up, mesh.Direct, 15), time.Minute, true},
		{"RTT noise below 10 µs", meshRow("west", mesh.Up, mesh.Direct, 12.004), 2 * time.Minute, false},
		{"new site", meshRow("north", mesh.Up, mesh.Direct, 12), 6 * time.Second, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if got := p.Due(ToAPI([]mesh.Row{c.row}, t0.Add(c.after)).Rows, t0.Add(c.after)); got != c.due {
				t.Errorf("due %v, want %v", got, c.due)
			}
		})
	}
}

// TestApplyBodySize: what one write costs at 200 sites (199 rows of
// long names), the figure package doc's API cost rests on.
func TestApplyBodySize(t *testing.T) {
	var rows []mesh.Row
	for i := range 199 {
		r := meshRow(fmt.Sprintf("westeurope-prod-%03d", i), mesh.Up, mesh.Direct, 23.456)
		r.Loss = 0.003
		rows = append(rows, r)
	}
	body, err := ApplyBody("eastus-prod-000.gw-1", ToAPI(rows, t0))
	if err != nil {
		t.Fatal(err)
	}
	per := len(body) / 199
	t.Logf("apply body for 199 rows: %d bytes (%d a row); 600 gateways every 60 s: %.0f KB/s", len(body), per, float64(len(body))*10/1000)
	if len(body) > 40000 {
		t.Errorf("body %d bytes: more than the 40 KB the package doc's cost assumes", len(body))
	}
}

// TestPublishAndListRealAPIServer: with the gateway's own credential,
// Step writes status.mesh, leaves kube/register's fields alone, and
// List reads every Gateway's rows back as mesh rows.
func TestPublishAndListRealAPIServer(t *testing.T) {
	api := gatewaytest.Start(t, "../../deploy/kubernetes/crds")
	ctx := context.Background()
	gwRes := api.Gateways
	api.CreateGateway(t, "east.gw1", "east", "10.1.0.5")
	api.CreateGateway(t, "west.gw1", "west", "10.1.0.5")
	// kube/register's field, under its own manager.
	force := true
	if _, err := gwRes.Patch(ctx, "east.gw1", "application/apply-patch+yaml",
		[]byte(`{"apiVersion":"bridgehead.io/v1alpha1","kind":"Gateway","metadata":{"name":"east.gw1"},"status":{"endpoint":"203.0.113.5:51820"}}`),
		metav1.PatchOptions{FieldManager: "bridgehead-gateway", Force: &force}, "status"); err != nil {
		t.Fatal(err)
	}
	gwClient := api.Client(t, "east.gw1")
	reg := prometheus.NewRegistry()
	p, err := New(Options{Client: gwClient, Gateway: "east.gw1", Registry: reg})
	if err != nil {
		t.Fatal(err)
	}
	rows := []mesh.Row{meshRow("west", mesh.Up, mesh.Direct, 12.34), meshRow("north", mesh.Down, mesh.None, 0)}
	if err := p.Step(ctx, rows, t0); err != nil {
		t.Fatal(err)
	}
	// Nothing changed: no second write.
	if err := p.Step(ctx, rows, t0.Add(10*time.Second)); err != nil {
		t.Fatal(err)
	}
	if n := testutil.ToFloat64(p.writes.WithLabelValues("ok")); n != 1 {
		t.Errorf("%v writes, want 1", n)
	}
	got, srcs, err := List(ctx, api.Admin)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || len(srcs) != 2 {
		t.Fatalf("rows %+v sources %+v", got, srcs)
	}
	north, west := got[0], got[1]
	if north.To != "north" || north.State != mesh.Down || west.To != "west" || west.State != mesh.Up || west.Path != mesh.Direct ||
		west.RTTMs != 12.34 || west.FromSite != "east" || west.FromGateway != "east.gw1" || !west.Measured.Equal(t0) || west.MTU != 1420 {
		t.Errorf("rows read back: %+v", got)
	}
	if srcs[1].Name != "Gateway west.gw1" || !strings.Contains(srcs[1].Error, "no mesh rows") {
		t.Errorf("sources %+v", srcs)
	}
	u, err := gwRes.Get(ctx, "east.gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ep, _, _ := unstructured.NestedString(u.Object, "status", "endpoint"); ep != "203.0.113.5:51820" {
		t.Errorf("status.endpoint %q: the mesh write touched kube/register's field", ep)
	}
	// The gateway cannot write another Gateway's rows.
	other, _ := New(Options{Client: gwClient, Gateway: "west.gw1"})
	if err := other.Step(ctx, rows, t0); err == nil {
		t.Error("east.gw1's credential wrote west.gw1's mesh rows")
	}
}
