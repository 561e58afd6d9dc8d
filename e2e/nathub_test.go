package e2e

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestNATHubFailover: site A, the hub, has two gateways (nat-lab.sh
// HUBS=2); E2's NAT is symmetric, so E1 and E2 stay on the hub. A 1 kHz UDP stream runs from pod E1 to pod E2 through the
// hub; the hub gateway relaying it is killed (SIGKILL). gw-e1 moves the
// flow to the other hub gateway: the stream's longest gap must stay
// under a second (median of three runs, none over 1.5 s, as for a
// site's gateways in TestHAFailover).
func TestNATHubFailover(t *testing.T) {
	requireRoot(t)
	var gaps []float64
	for run := range 3 {
		t.Run(strconv.Itoa(run), func(t *testing.T) { gaps = append(gaps, natHubFailoverRun(t)) })
	}
	checkGaps(t, "hub gateway killed", gaps)
}

// natVia returns, for the gateway of site s, the hub gateways that carry
// its flows to each remote gateway reached through a hub.
func (l *lab) natVia(s string) map[string][]string {
	l.t.Helper()
	out, err := l.exec(s+"-gw", filepath.Join(l.bin, "bridgehead"), "status", "--json", "--socket", filepath.Join(l.dir, s+".sock"))
	var st struct {
		Peers []struct {
			Gateway string   `json:"gateway"`
			Path    string   `json:"path"`
			Via     []string `json:"via"`
		} `json:"peers"`
	}
	if jerr := json.Unmarshal([]byte(out), &st); jerr != nil {
		l.t.Fatalf("status: %v, %v\n%s", err, jerr, out)
	}
	m := map[string][]string{}
	for _, p := range st.Peers {
		if p.Path == "hub" {
			m[p.Gateway] = p.Via
		}
	}
	return m
}

// waitVia waits until the gateway of site s relays to gw through exactly
// the hub gateways want.
func (l *lab) waitVia(s, gw string, want ...string) {
	l.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		got := l.natVia(s)[gw]
		if strings.Join(got, ",") == strings.Join(want, ",") {
			return
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("gw-%s relays to %s through %v, want %v", s, gw, got, want)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// forwarded returns how many relay messages each hub gateway forwarded.
func (l *lab) forwarded(hubs ...string) map[string]float64 {
	m := map[string]float64{}
	for _, h := range hubs {
		m[h] = metric(l.metrics(h), `bridgehead_transit_datagrams_total{direction="forwarded"}`)
	}
	return m
}

func natHubFailoverRun(t *testing.T) float64 {
	// E2's NAT is symmetric: E1 and E2 cannot go direct.
	l := startLabScript(t, "deploy/lab/nat-lab.sh", []string{"a", "a2", "e1", "e2"}, "HUBS=2", "NAT_E2=random")
	l.waitPing("e1", "e2", 20*time.Second)
	both := []string{"site-a/gw-a", "site-a/gw-a2"}
	l.waitVia("e1", "gw-e2", both...)
	l.waitVia("e2", "gw-e1", both...)

	// The hub gateway carrying the stream is the one whose forwarded
	// count grows by the stream's second (probes add a few a second).
	const streamFor = 8 * time.Second
	results := l.sinkAt("e2-node", natPods["e2"], 7000)
	before := l.forwarded("a", "a2")
	_, streamDone := l.bg("e1-node", filepath.Join(l.bin, "bhprobe"), "udp-stream", "-src", natPods["e1"],
		"-rate", "1000", "-duration", streamFor.String(), natPods["e2"]+":7000")
	started := time.Now()
	time.Sleep(time.Second)
	after := l.forwarded("a", "a2")
	carrier, other := "a", "a2"
	if after["a2"]-before["a2"] > after["a"]-before["a"] {
		carrier, other = "a2", "a"
	}
	raw, err := os.ReadFile(filepath.Join(l.dir, carrier+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatalf("kill gw-%s (pid %d): %v", carrier, pid, err)
	}
	killedAt := time.Now()
	if left := streamFor - killedAt.Sub(started); left < 3*time.Second {
		t.Fatalf("the kill came %s after the stream started, %s before its end: too late to measure a failover", killedAt.Sub(started), left)
	}
	l.waitVia("e1", "gw-e2", "site-a/gw-"+other)
	moved := time.Since(killedAt)
	streamDone()
	stats := results()["0"]
	if stats.Duplicates != 0 {
		t.Errorf("%d datagrams delivered twice", stats.Duplicates)
	}
	if stats.Received < 5000 {
		t.Errorf("pod E2 received %d of the stream's 8000 datagrams", stats.Received)
	}
	t.Logf("gw-%s relayed the stream (%.0f vs %.0f forwarded), killed %s after it started; gw-e1 relays through gw-%s only after at most %s; longest gap %.0f ms, %d received, %d lost",
		carrier, after[carrier]-before[carrier], after[other]-before[other], killedAt.Sub(started).Round(time.Millisecond),
		other, moved.Round(time.Millisecond), stats.MaxGapMs, stats.Received, stats.Lost)
	return stats.MaxGapMs
}
