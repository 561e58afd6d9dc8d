package daemon

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/health"
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
