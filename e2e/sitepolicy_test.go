package e2e

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/router"
)

// TestSitePolicy runs the site source allow-lists on the two-site lab.
// Site B admits no remote pods (allowedSources: []), first in B's config
// only (A's is older and sends them: B drops them after opening), then in
// both (A drops them before sealing); A's node range still reaches B,
// B's pod range still reaches A's node, and loosening the list to
// [site-a] lets A's pods through again, on the same sessions.
func TestSitePolicy(t *testing.T) {
	start := time.Now()
	l := startLab(t)
	up := time.Now()
	const nodeA = "10.224.0.5"
	l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	orig := map[string]string{"a": l.readConfig("a"), "b": l.readConfig("b")}
	withList := func(site, list string) string {
		t.Helper()
		c := orig[site]
		if !strings.Contains(c, "  - name: site-b\n") {
			t.Fatalf("no site-b in %s's config:\n%s", site, c)
		}
		return strings.Replace(c, "  - name: site-b\n", "  - name: site-b\n    allowedSources: "+list+"\n", 1)
	}
	reloads := map[string]int{}
	reload := func(site, list string) {
		t.Helper()
		l.writeConfig(site, withList(site, list))
		reloads[site]++
		l.waitLog(site, "config reloaded", reloads[site])
	}
	pass := func(from, src, dst string) {
		t.Helper()
		l.probe(from, "ping", "-src", src, "-count", "2", "-timeout", "2s", dst)
	}
	refused := func(from, src, dst string) {
		t.Helper()
		if out, err := l.exec(from, filepath.Join(l.bin, "bhprobe"), "ping", "-src", src, "-count", "2", "-timeout", "300ms", dst); err == nil {
			t.Fatalf("ping %s → %s passed a list that refuses it:\n%s", src, dst, out)
		}
	}
	const (
		bOutside = `bridgehead_site_policy_drops_total{direction="outside",site="site-a"}`
		aInside  = `bridgehead_site_policy_drops_total{direction="inside",site="site-b"}`
	)
	// A startup handshake may complete one RekeyTimeout after start
	// (see TestReload); sessions are counted from after it, while the
	// first subtest runs.
	completed := `bridgehead_handshakes_total{result="completed"}`
	var hs float64
	counted := make(chan struct{})
	go func() {
		defer close(counted)
		time.Sleep(time.Until(up.Add(router.RekeyTimeout + router.RekeyJitter + 200*time.Millisecond)))
		out, _ := l.scrape("b")
		hs = metric(out, completed)
	}()

	t.Run("receiver only", func(t *testing.T) {
		l.t = t
		reload("b", "[]")
		refused("a-node", podA, podB)
		refused("a-node", podA6, podB6)
		l.waitMetric("b", bOutside, 4)
		if v := metric(l.metrics("b"), `bridgehead_dropped_packets_total{direction="outside",reason="site_policy"}`); v < 4 {
			t.Errorf("reason site_policy outside on B = %v, want >= 4", v)
		}
		pass("a-node", nodeA, podB) // node ranges are never restricted
		// B's pods still reach A's nodes; replies from A's pods would
		// be refused (the list is stateless).
		pass("b-node", podB, nodeA)
		if v := metric(l.metrics("a"), aInside); v > 0 {
			t.Errorf("A dropped %v before it knew the list", v)
		}
	})

	t.Run("sender too", func(t *testing.T) {
		l.t = t
		before := metric(l.metrics("b"), bOutside)
		reload("a", "[]")
		refused("a-node", podA, podB)
		l.waitMetric("a", aInside, 2)
		if v := metric(l.metrics("b"), bOutside); v != before {
			t.Errorf("B still received refused packets: %v → %v", before, v)
		}
		pass("a-node", nodeA, podB)
	})

	<-counted
	t.Run("loosened", func(t *testing.T) {
		l.t = t
		reload("a", "[site-a]")
		reload("b", "[site-a]")
		pass("a-node", podA, podB)
		pass("b-node", podB, podA)
		if got := metric(l.metrics("b"), completed); got != hs {
			t.Errorf("the reloads renegotiated sessions: completed handshakes %v → %v", hs, got)
		}
	})
	t.Logf("took %v", time.Since(start).Round(100*time.Millisecond))
}
