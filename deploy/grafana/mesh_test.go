package grafana

import (
	"slices"
	"strings"
	"testing"
)

// TestMeshPanels: the dashboard draws the mesh as sites by sites from
// Prometheus: a table grouped to a matrix (rows the gateways' own site,
// columns the remote site) over bridgehead_mesh_site_state, whose four
// values each have a colour and a name, and the RTT matrix beside it.
func TestMeshPanels(t *testing.T) {
	dash := load(t)
	found := map[string]bool{}
	for _, p := range dash["panels"].([]any) {
		p := p.(map[string]any)
		title, _ := p["title"].(string)
		if !strings.HasPrefix(title, "Mesh: ") {
			continue
		}
		found[title] = true
		if p["type"] != "table" {
			t.Errorf("%q: type %v, want table", title, p["type"])
		}
		tr := p["transformations"].([]any)[0].(map[string]any)
		opts := tr["options"].(map[string]any)
		if tr["id"] != "groupingToMatrix" || opts["rowField"] != "local_site" || opts["columnField"] != "site" || opts["valueField"] != "Value" {
			t.Errorf("%q: transformation %v, want groupingToMatrix of local_site by site", title, tr)
		}
		target := p["targets"].([]any)[0].(map[string]any)
		if target["format"] != "table" || target["instant"] != true || !strings.Contains(target["expr"].(string), "by (local_site, site)") {
			t.Errorf("%q: query %v", title, target)
		}
	}
	for _, want := range []string{"Mesh: which site reaches which", "Mesh: median probe round trip"} {
		if !found[want] {
			t.Errorf("no panel %q", want)
		}
	}
	used, err := UsedMetrics(Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{"bridgehead_mesh_site_state", "bridgehead_mesh_site_rtt_seconds"} {
		if !slices.Contains(used, m) {
			t.Errorf("dashboard does not show %s", m)
		}
	}
	// Every value of bridgehead_mesh_site_state has its name.
	for _, p := range dash["panels"].([]any) {
		p := p.(map[string]any)
		if p["title"] != "Mesh: which site reaches which" {
			continue
		}
		m := p["fieldConfig"].(map[string]any)["defaults"].(map[string]any)["mappings"].([]any)[0].(map[string]any)["options"].(map[string]any)
		for v, name := range map[string]string{"1": "up", "0.5": "degraded", "0": "down", "-1": "connecting"} {
			if o, _ := m[v].(map[string]any); o == nil || o["text"] != name {
				t.Errorf("value %s: mapping %v, want %q", v, m[v], name)
			}
		}
	}
}
