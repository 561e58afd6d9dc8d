package e2e

import (
	"regexp"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/deploy/grafana"
)

var typeLine = regexp.MustCompile(`(?m)^# TYPE (bridgehead_\w+) (\w+)$`)

// TestDashboardMetrics: every metric the Grafana dashboard queries is
// exported by a running lab gateway with a remote site and a relay, so a
// renamed metric fails here and not on an operator's empty panel.
func TestDashboardMetrics(t *testing.T) {
	requireRoot(t)
	p := newPKI(t, t.TempDir())
	l := startLab(t, "CONFIG_EXTRA_A="+relayYAML(p, false))
	scrape := l.metrics("a")
	exported := map[string]string{}
	for _, m := range typeLine.FindAllStringSubmatch(scrape, -1) {
		exported[m[1]] = m[2]
	}
	used, err := grafana.UsedMetrics(grafana.Dashboard)
	if err != nil {
		t.Fatal(err)
	}
	if len(used) < 20 || len(exported) < 20 {
		t.Fatalf("dashboard names %d metrics, gateway exports %d families: too few to compare", len(used), len(exported))
	}
	if missing := grafana.Missing(used, exported); len(missing) > 0 {
		t.Errorf("the dashboard queries metrics gateway A does not export: %s", strings.Join(missing, ", "))
	}
	t.Logf("%d metrics in dashboard queries, all among the %d bridgehead_* families of gateway A", len(used), len(exported))
}
