package grafana

import (
	"crypto/rand"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/daemon"
	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
	"github.com/prometheus/client_golang/prometheus"
)

// exported lists the bridgehead_* families of a gateway with one remote
// peer (per-peer series exist only for configured peers) and a relay,
// by name, with their types where known. The end-to-end test
// TestDashboardMetrics checks the same against a running gateway.
func exported(t *testing.T) map[string]string {
	t.Helper()
	key, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	peerKey, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id := &bhcrypto.Identity{Private: key, Public: key.PublicKey(), Cipher: bhcrypto.AESGCM, Prologue: bhcrypto.Prologue("test")}
	local, remote := netip.MustParseAddrPort("192.0.2.1:51820"), netip.MustParseAddrPort("192.0.2.2:51820")
	bind, other := udp.NewPair(local, remote)
	dev := tun.NewChannel("t", 1420)
	t.Cleanup(func() { dev.Close(); bind.Close(); other.Close() })
	r, err := router.New(router.Options{TUN: dev, Bind: bind, Identity: id})
	if err != nil {
		t.Fatal(err)
	}
	err = r.SetConfig(&router.Config{LocalSite: "a", Sites: []router.SiteConfig{
		{Name: "a", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}},
		{Name: "b", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}, Gateways: []router.PeerConfig{
			{Site: "b", Name: "gw-b1", PublicKey: peerKey.PublicKey(), Endpoint: remote},
		}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	names, err := daemon.MetricNames(r)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, n := range names {
		out[n] = ""
	}
	reg := prometheus.NewRegistry()
	rl, err := relay.New(relay.Options{Registry: reg, Config: relay.Config{AllowedPorts: []uint16{10250},
		MaxConnections: 1, MaxConnectionsPerDestination: 1, IdleTimeout: time.Minute, HeaderTimeout: time.Second}})
	if err != nil {
		t.Fatal(err)
	}
	defer rl.Close()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		out[mf.GetName()] = strings.ToLower(mf.GetType().String())
	}
	return out
}

func load(t *testing.T) map[string]any {
	t.Helper()
	var dash map[string]any
	if err := json.Unmarshal(Dashboard, &dash); err != nil {
		t.Fatalf("bridgehead.json: %v", err)
	}
	return dash
}

func TestDashboardMetricsExist(t *testing.T) {
	used, err := UsedMetrics(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	if missing := Missing(used, exported(t)); len(missing) > 0 {
		t.Errorf("dashboard queries metrics the daemon does not export: %q", missing)
	}
	// What an operator needs to see must stay on the dashboard.
	for _, m := range []string{
		"bridgehead_peer_sent_bytes_total", "bridgehead_peer_received_bytes_total",
		"bridgehead_handshakes_total", "bridgehead_dropped_packets_total",
		"bridgehead_ready", "bridgehead_site_up",
		"bridgehead_peer_session_age_seconds", "bridgehead_peer_last_handshake_timestamp_seconds",
		"bridgehead_config_reloads_total",
		"bridgehead_peer_up", "bridgehead_peer_probe_rtt_seconds", "bridgehead_peer_probes_total",
		"bridgehead_peer_down_total", "bridgehead_peer_state_change_timestamp_seconds",
		"bridgehead_relay_connections_active", "bridgehead_relay_connections_total", "bridgehead_relay_bytes_total",
		"bridgehead_relay_refused_total", "bridgehead_relay_closed_total", "bridgehead_relay_dial_duration_seconds_bucket",
	} {
		if !slices.Contains(used, m) {
			t.Errorf("dashboard does not show %s", m)
		}
	}
}

func TestDashboardPanels(t *testing.T) {
	dash := load(t)
	if dash["uid"] != "bridgehead" {
		t.Errorf("uid = %v, want bridgehead (links and provisioning use it)", dash["uid"])
	}
	ids := map[float64]bool{}
	var titles []string
	for _, p := range dash["panels"].([]any) {
		p := p.(map[string]any)
		id, _ := p["id"].(float64)
		if ids[id] {
			t.Errorf("panel id %v used twice", id)
		}
		ids[id] = true
		if _, ok := p["gridPos"].(map[string]any); !ok {
			t.Errorf("panel %v has no gridPos", p["title"])
		}
		if p["type"] == "row" {
			continue
		}
		titles = append(titles, p["title"].(string))
		ds, _ := p["datasource"].(map[string]any)
		if ds["uid"] != "${datasource}" {
			t.Errorf("panel %q: datasource %v, want the ${datasource} variable", p["title"], p["datasource"])
		}
		if targets, _ := p["targets"].([]any); len(targets) == 0 {
			t.Errorf("panel %q has no queries", p["title"])
		}
	}
	if len(titles) != len(slices.Compact(slices.Sorted(slices.Values(titles)))) {
		t.Errorf("duplicate panel titles: %q", titles)
	}
}

func TestMissing(t *testing.T) {
	exported := map[string]string{"bridgehead_a_total": "counter", "bridgehead_h_seconds": "histogram", "bridgehead_s": "summary", "bridgehead_g": ""}
	for _, tc := range []struct {
		used []string
		want []string
	}{
		{[]string{"bridgehead_a_total", "bridgehead_g"}, nil},
		{[]string{"bridgehead_h_seconds_bucket", "bridgehead_h_seconds_sum", "bridgehead_h_seconds_count"}, nil},
		{[]string{"bridgehead_s_sum", "bridgehead_s_bucket"}, []string{"bridgehead_s_bucket"}},
		{[]string{"bridgehead_renamed_total", "bridgehead_a_total_count"}, []string{"bridgehead_renamed_total", "bridgehead_a_total_count"}},
	} {
		if got := Missing(tc.used, exported); !slices.Equal(got, tc.want) {
			t.Errorf("Missing(%q) = %q, want %q", tc.used, got, tc.want)
		}
	}
}

func FuzzQueries(f *testing.F) {
	f.Add(Dashboard)
	f.Add([]byte(`{"panels":[{"targets":[{"expr":1}],"panels":[2]}],"templating":{"list":[3,{"query":{"query":"x"}}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		qs, err := Queries(b)
		if err != nil && qs != nil {
			t.Fatal("queries with an error")
		}
	})
}
