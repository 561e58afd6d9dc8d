package daemon

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/health"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/mesh"
	"github.com/bridgehead/bridgehead/router"
)

// TestMeshHandlers: /mesh.json and /mesh show the gateway's rows from
// the router's liveness as it is at the request: a gateway that went
// down is red at once, one standing in for it makes the site degraded
// (standby).
func TestMeshHandlers(t *testing.T) {
	now := time.Now()
	peers := []health.PeerState{
		{Site: "b", Gateway: "gw-b1", Path: health.PathDirect, Live: router.LivenessStats{State: router.LiveUp, ProbeInterval: 200 * time.Millisecond, ProbeRTT: 2 * time.Millisecond, PathMTU: 1420, LastAck: now}},
		{Site: "b", Gateway: "gw-b2", Path: health.PathDirect, Live: router.LivenessStats{State: router.LiveDown, Reason: router.DownNoAnswer, ProbeInterval: 200 * time.Millisecond, LastAck: now.Add(-time.Second)}},
		{Site: "c", Gateway: "gw-c1", Path: health.PathHub, Via: []string{"b/gw-b1"}, Live: router.LivenessStats{State: router.LiveUp, ProbeInterval: 200 * time.Millisecond, ProbeRTT: 5 * time.Millisecond, LastAck: now}},
	}
	cfg := &config.Config{Site: "a", Gateway: "gw-a1"}
	v := &meshView{peers: func() []health.PeerState { return peers }, cfg: func() *config.Config { return cfg },
		tracker: mesh.NewTracker(mesh.TrackerOptions{Site: "a", Gateway: "gw-a1"}), log: slog.New(slog.DiscardHandler)}
	g := &gateway{mesh: v}
	mux := http.NewServeMux()
	g.meshHandlers(mux)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	res, err := http.Get(srv.URL + "/mesh.json")
	if err != nil {
		t.Fatal(err)
	}
	var m mesh.Matrix
	if err := json.NewDecoder(res.Body).Decode(&m); err != nil {
		t.Fatal(err)
	}
	res.Body.Close()
	ab, _ := m.Cell("a", "b")
	ac, _ := m.Cell("a", "c")
	if ab.State != mesh.Degraded || mesh.PathText(ab.Path, ab.Via) != "standby gw-b1" || ab.RTTMs != 2 || ab.MTU != 1420 {
		t.Errorf("a → b: %+v", ab)
	}
	if ac.State != mesh.Up || mesh.PathText(ac.Path, ac.Via) != "hub b" {
		t.Errorf("a → c: %+v", ac)
	}
	if links := ab.Rows[0].Links; len(links) != 2 || links[1].State != mesh.Down || links[1].Reason != "no answer" {
		t.Errorf("a → b links: %+v", links)
	}

	res, err = http.Get(srv.URL + "/mesh")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if ct := res.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/html") || !strings.Contains(res.Header.Get("Content-Security-Policy"), "default-src 'none'") {
		t.Errorf("content type %q, CSP %q", ct, res.Header.Get("Content-Security-Policy"))
	}
	for _, want := range []string{`data-from="a" data-to="b" data-state="degraded"`, `data-from="a" data-to="c" data-state="up"`, "bridgehead mesh: a/gw-a1"} {
		if !strings.Contains(string(body), want) {
			t.Errorf("page lacks %q", want)
		}
	}
}

// TestMeshCluster: in Kubernetes mode the page adds every Gateway's
// published rows to the gateway's own live ones (which win for the
// gateway itself), listing the Gateways at most every meshClusterTTL.
func TestMeshCluster(t *testing.T) {
	now := time.Now()
	west := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Gateway",
		"metadata": map[string]any{"name": "b.gw-b1"},
		"spec":     map[string]any{"site": "b", "address": "10.2.0.4"},
		"status": map[string]any{"mesh": map[string]any{"observedAt": now.UTC().Format(time.RFC3339),
			"rows": []any{map[string]any{"site": "a", "state": "down"}}}},
	}}
	// The gateway's own published rows, older than its live view.
	self := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Gateway",
		"metadata": map[string]any{"name": "gw-a1"},
		"spec":     map[string]any{"site": "a", "address": "10.1.0.4"},
		"status": map[string]any{"mesh": map[string]any{"observedAt": now.UTC().Format(time.RFC3339),
			"rows": []any{map[string]any{"site": "b", "state": "down"}}}},
	}}
	gvr := v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)
	client := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr: "GatewayList"})
	for _, o := range []*unstructured.Unstructured{west, self} {
		if _, err := client.Resource(gvr).Create(context.Background(), o, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cfg := &config.Config{Site: "a", Gateway: "gw-a1"}
	peers := []health.PeerState{{Site: "b", Gateway: "gw-b1", Path: health.PathDirect,
		Live: router.LivenessStats{State: router.LiveUp, ProbeInterval: 200 * time.Millisecond, LastAck: now}}}
	v := &meshView{peers: func() []health.PeerState { return peers }, cfg: func() *config.Config { return cfg }, client: client,
		tracker: mesh.NewTracker(mesh.TrackerOptions{Site: "a", Gateway: "gw-a1"}), log: slog.New(slog.DiscardHandler)}
	m := v.matrix(context.Background(), false)
	ab, _ := m.Cell("a", "b")
	ba, _ := m.Cell("b", "a")
	if ab.State != mesh.Up || len(ab.Rows) != 1 || ba.State != mesh.Down || len(m.Sources) != 3 {
		t.Errorf("a → b %s (%d rows), b → a %s, sources %+v", ab.State, len(ab.Rows), ba.State, m.Sources)
	}
	if local := v.matrix(context.Background(), true); len(local.Cells) != 1 {
		t.Errorf("?local=1: %d cells, want the gateway's own 1", len(local.Cells))
	}
	lists := 0 // the test's creates are actions too; lists are the view's
	for _, a := range client.Actions() {
		if a.GetVerb() == "list" {
			lists++
		}
	}
	if lists != 1 {
		t.Errorf("%d list calls for two views within %v, want 1", lists, meshClusterTTL)
	}
}
