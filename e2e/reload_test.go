package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/router"
)

// siteC is a third site appended to gateway A's catalog. Its gateway is
// never started: adding it must not disturb anything that runs.
func siteC(t *testing.T, l *lab) string {
	key, err := exec.Command(filepath.Join(l.bin, "bridgehead"), "genkey").Output()
	if err != nil {
		t.Fatal(err)
	}
	pubCmd := exec.Command(filepath.Join(l.bin, "bridgehead"), "pubkey")
	pubCmd.Stdin = strings.NewReader(string(key))
	pub, err := pubCmd.Output()
	if err != nil {
		t.Fatal(err)
	}
	return `  - name: site-c
    nodeCIDRs: [172.20.0.0/24]
    podCIDRs: [10.246.0.0/16]
    gateways:
      - name: gw-c1
        address: 172.20.0.2
        endpoint: 203.0.113.3:51820
        publicKey: ` + strings.TrimSpace(string(pub)) + "\n"
}

// writeConfig replaces a gateway's config the way editors and config
// management do: write a temporary file, rename it over the old one.
func (l *lab) writeConfig(site, content string) {
	l.t.Helper()
	path := filepath.Join(l.dir, site+".yaml")
	tmp := path + ".new"
	if err := os.WriteFile(tmp, []byte(content), 0o644); err != nil {
		l.t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.t.Fatal(err)
	}
}

func (l *lab) readConfig(site string) string {
	b, err := os.ReadFile(filepath.Join(l.dir, site+".yaml"))
	if err != nil {
		l.t.Fatal(err)
	}
	return string(b)
}

// waitLog waits until a gateway's log contains s n times.
func (l *lab) waitLog(site, s string, n int) string {
	l.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(l.dir, site+".log"))
		if strings.Count(string(b), s) >= n {
			return string(b)
		}
		if time.Now().After(deadline) {
			l.t.Fatalf("gateway %s never logged %q %d times; log:\n%s", site, s, n, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gatewayPID is the PID of a lab gateway ("a" is the first started).
func (l *lab) gatewayPID(site string) int {
	b, err := os.ReadFile(filepath.Join(l.dir, "pids"))
	if err != nil {
		l.t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	i := 0
	if site == "b" {
		i = 1
	}
	var pid int
	for _, c := range lines[i] {
		pid = pid*10 + int(c-'0')
	}
	return pid
}

// TestReload proves the reload promises on real processes: a reload that
// adds a site during a TCP stream loses nothing and keeps the session; a
// bad file is refused while traffic continues, with the same errors that
// `bridgehead check` prints; removing a site removes its kernel routes and
// its traffic is dropped as no_route.
func TestReload(t *testing.T) {
	l := startLab(t)
	up := time.Now()
	l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	// Both gateways initiate at start. When A's first initiation reaches
	// B before B listens, A has its session from B's initiation and
	// completes its own only at the retransmit, one RekeyTimeout plus
	// jitter later: a startup handshake, not the reload's. Count from
	// after that.
	time.Sleep(time.Until(up.Add(router.RekeyTimeout + router.RekeyJitter + 200*time.Millisecond)))
	completed := `bridgehead_handshakes_total{result="completed"}`
	hsA := metric(l.metrics("a"), completed)
	orig := l.readConfig("a")

	t.Run("add a site during a TCP stream", func(t *testing.T) {
		l.t = t
		done := make(chan struct{})
		go func() {
			defer close(done)
			time.Sleep(300 * time.Millisecond)
			l.writeConfig("a", orig+siteC(t, l))
		}()
		l.transfer("a-node", podA, "b-node", podB, 7010, 200<<20)
		<-done
		l.waitLog("a", "config reloaded", 1)
		routes := l.mustExec("a-gw", "ip", "route", "show", "dev", "bh0")
		for _, want := range []string{"10.246.0.0/16", "172.20.0.0/24", "10.245.0.0/16"} {
			if !strings.Contains(routes, want) {
				t.Errorf("gateway A routes lack %s after reload:\n%s", want, routes)
			}
		}
		if got := metric(l.metrics("a"), completed); got != hsA {
			t.Errorf("reload renegotiated sessions: completed handshakes %v -> %v", hsA, got)
		}
	})

	t.Run("invalid file refused, traffic continues", func(t *testing.T) {
		l.t = t
		bad := strings.Replace(l.readConfig("a"), "podCIDRs: [10.246.0.0/16]", "podCIDRs: [10.244.0.0/16]", 1)
		bad = strings.Replace(bad, "mtu: 1420", "mtuu: 1420", 1)
		l.writeConfig("a", bad)
		log := l.waitLog("a", "config reload refused", 1)
		l.probe("a-node", "ping", "-src", podA, "-count", "2", podB)
		out, err := exec.Command(filepath.Join(l.bin, "bridgehead"), "check", "--config", filepath.Join(l.dir, "a.yaml")).CombinedOutput()
		if err == nil {
			t.Fatalf("check accepted the bad file:\n%s", out)
		}
		// Every error check prints is in the refusal the daemon logged.
		compared := 0
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if !strings.Contains(line, "a.yaml:") || strings.HasSuffix(line, "problem(s)") || strings.HasPrefix(line, "warning: ") {
				continue // warnings do not refuse a file
			}
			msg := line[strings.Index(line, "a.yaml:"):]
			compared++
			if !strings.Contains(log, strings.ReplaceAll(msg, `"`, `\"`)) && !strings.Contains(log, msg) {
				t.Errorf("check reports %q, the daemon's log does not", msg)
			}
		}
		if compared < 2 {
			t.Errorf("check printed %d errors for a file with two problems:\n%s", compared, out)
		}
		if !strings.Contains(string(out), "mtuu") || !strings.Contains(string(out), "overlaps") {
			t.Errorf("check output lacks the unknown field or the overlap:\n%s", out)
		}
	})

	t.Run("remove a site on SIGHUP", func(t *testing.T) {
		l.t = t
		// Keep site-a only: drop site-b (and site-c) from the catalog.
		cut := strings.Index(orig, "  - name: site-b")
		l.writeConfig("a", orig[:cut])
		// The watcher would pick this up too; SIGHUP must work on its own.
		if err := syscall.Kill(l.gatewayPID("a"), syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		l.waitLog("a", "config reloaded", 2)
		routes := l.mustExec("a-gw", "ip", "route", "show", "dev", "bh0")
		if strings.Contains(routes, "10.245.0.0/16") || strings.Contains(routes, "192.168.50.0/24") {
			t.Fatalf("site-b routes still in the kernel:\n%s", routes)
		}
		// A stale route pointing into the tunnel: bridgehead itself
		// must drop the traffic as no_route.
		series := `bridgehead_dropped_packets_total{direction="inside",reason="no_route"}`
		before := metric(l.metrics("a"), series)
		l.mustExec("a-gw", "ip", "route", "add", "10.245.0.0/16", "dev", "bh0")
		if out, err := l.exec("a-node", filepath.Join(l.bin, "bhprobe"), "ping", "-src", podA, "-count", "2", "-timeout", "300ms", podB); err == nil {
			t.Fatalf("ping to a removed site succeeded:\n%s", out)
		}
		l.waitMetric("a", series, before+2)
	})
}
