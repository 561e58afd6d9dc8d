package grafana

import (
	"crypto/rand"
	"encoding/json"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"sort"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/daemon"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

var metricName = regexp.MustCompile(`bridgehead_[a-z_]+`)

// exported lists the bridgehead_* families of a gateway with one remote
// peer (per-peer series exist only for configured peers).
func exported(t *testing.T) map[string]bool {
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
	out := map[string]bool{}
	for _, n := range names {
		out[n] = true
	}
	return out
}

// queries returns every PromQL string of the dashboard: panel target
// exprs (rows may nest panels) and templating queries.
func queries(t *testing.T, dash map[string]any) []string {
	t.Helper()
	var out []string
	var panel func(p map[string]any)
	panel = func(p map[string]any) {
		targets, _ := p["targets"].([]any)
		for _, tg := range targets {
			if e, ok := tg.(map[string]any)["expr"].(string); ok {
				out = append(out, e)
			}
		}
		sub, _ := p["panels"].([]any)
		for _, s := range sub {
			panel(s.(map[string]any))
		}
	}
	panel(dash)
	tmpl, _ := dash["templating"].(map[string]any)
	vars, _ := tmpl["list"].([]any)
	for _, v := range vars {
		switch q := v.(map[string]any)["query"].(type) {
		case string:
			out = append(out, q)
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

func load(t *testing.T) map[string]any {
	t.Helper()
	raw, err := os.ReadFile("bridgehead.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash map[string]any
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("bridgehead.json: %v", err)
	}
	return dash
}

func TestDashboardMetricsExist(t *testing.T) {
	dash := load(t)
	have := exported(t)
	used := map[string]bool{}
	for _, q := range queries(t, dash) {
		for _, m := range metricName.FindAllString(q, -1) {
			used[m] = true
		}
	}
	var missing []string
	for m := range used {
		if !have[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Errorf("dashboard queries metrics the daemon does not export: %q", missing)
	}
	// What an operator needs to see must stay on the dashboard.
	for _, m := range []string{
		"bridgehead_peer_sent_bytes_total", "bridgehead_peer_received_bytes_total",
		"bridgehead_handshakes_total", "bridgehead_dropped_packets_total",
		"bridgehead_ready", "bridgehead_site_up",
		"bridgehead_peer_session_age_seconds", "bridgehead_peer_last_handshake_timestamp_seconds",
		"bridgehead_config_reloads_total",
	} {
		if !used[m] {
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
