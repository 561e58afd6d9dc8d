package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/meshstatus"
	"github.com/bridgehead/bridgehead/mesh"
)

// TestPluginMeshRealAPIServer: `kubectl bridgehead mesh` reads every
// Gateway's published rows through the kubeconfig and shows one cell per
// site pair, the rows of a site's gateways merged; a pair down exits 1.
func TestPluginMeshRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, "../../deploy/kubernetes/crds")
	ctx := context.Background()
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	res := admin.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource))
	now := time.Now()
	publish := func(name, site string, rows ...v1.MeshRow) {
		t.Helper()
		gw := &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.GatewaySpec{Site: site, Address: "10.1.0.5"}}
		m, _ := runtime.DefaultUnstructuredConverter.ToUnstructured(gw)
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(v1.SchemeGroupVersion.String())
		u.SetKind("Gateway")
		if _, err := res.Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		body, err := meshstatus.ApplyBody(name, &v1.MeshStatus{ObservedAt: metav1.NewTime(now), Rows: rows})
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := res.Patch(ctx, name, "application/apply-patch+yaml", body, metav1.PatchOptions{FieldManager: meshstatus.FieldManager, Force: &force}, "status"); err != nil {
			t.Fatal(err)
		}
	}
	row := func(site, state, path string, rtt int64) v1.MeshRow {
		return v1.MeshRow{Site: site, State: state, Path: path, Gateways: 2, GatewaysUp: 2, RTTMicroseconds: rtt, MTU: 1420, Since: metav1.NewTime(now)}
	}
	publish("east.gw1", "east", row("west", v1.MeshUp, "direct", 12000))
	publish("east.gw2", "east", row("west", v1.MeshUp, "direct", 14000))
	publish("west.gw1", "west", row("east", v1.MeshUp, "direct", 13000))
	kubeconfig := env.Kubeconfig
	plugin := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := dispatch(append([]string{"/usr/bin/kubectl-bridgehead", "mesh", "--kubeconfig", kubeconfig}, args...), strings.NewReader(""), &out, &errb)
		return code, out.String(), errb.String()
	}

	code, out, errOut := plugin("-o", "json")
	if code != 0 {
		t.Fatalf("exit %d\n%s%s", code, out, errOut)
	}
	var m mesh.Matrix
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		t.Fatal(err)
	}
	ew, _ := m.Cell("east", "west")
	we, _ := m.Cell("west", "east")
	if len(m.Cells) != 2 || ew.State != mesh.Up || len(ew.Rows) != 2 || ew.RTTMs != 13 || we.State != mesh.Up || we.MTU != 1420 {
		t.Errorf("matrix %+v", m)
	}
	code, out, _ = plugin()
	if f := strings.Fields(tableLine(out, "east", "west")); code != 0 || !strings.Contains(out, "2 sites, 2 pairs: 2 up") ||
		len(f) < 8 || f[2] != "up" || f[3] != "direct" || f[4] != "13ms" || f[6] != "1420" {
		t.Errorf("table (exit %d):\n%s", code, out)
	}

	// A site whose gateway reaches no gateway of west: that pair is
	// down, and the plugin exits 1.
	publish("north.gw1", "north", row("west", v1.MeshDown, "", 0))
	code, out, _ = plugin()
	if code != 1 || !strings.Contains(tableLine(out, "north", "west"), " down ") {
		t.Errorf("with a pair down (exit %d):\n%s", code, out)
	}
}

func tableLine(out, from, to string) string {
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == from && f[1] == to {
			return l
		}
	}
	return ""
}
