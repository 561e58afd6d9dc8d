package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHealthyLabLogsNoWarning: a healthy lab, traffic both ways over IPv4
// and IPv6, logs no WARN or ERROR line on either gateway, including the
// drop summary that follows the TUN's own IPv6 MLD and router
// solicitation packets at start.
func TestHealthyLabLogsNoWarning(t *testing.T) {
	l := startLab(t)
	start := time.Now()
	l.probe("a-node", "ping", "-src", podA, "-count", "2", podB)
	l.probe("b-node", "ping", "-src", podB, "-count", "2", podA)
	l.probe("a-node", "ping", "-src", podA6, "-count", "2", podB6)
	l.probe("b-node", "ping", "-src", podB6, "-count", "2", podA6)
	series := `bridgehead_dropped_packets_total{direction="inside",reason="not_unicast"}`
	for metric(l.metrics("a"), series) < 1 && time.Since(start) < 15*time.Second {
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("%s = %v on gateway A", series, metric(l.metrics("a"), series))
	// Let the drop summary that would carry them be written (one per
	// router.DropLogInterval, 10 s).
	time.Sleep(11 * time.Second)
	for _, s := range []string{"a", "b"} {
		log, err := os.ReadFile(filepath.Join(l.dir, s+".log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(log), "\n") {
			if strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
				t.Errorf("gateway %s: %s", s, line)
			}
		}
	}
}
