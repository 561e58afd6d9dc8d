package e2e

import (
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestOperations: metrics move while traffic flows; when the peer gateway
// stops, /readyz turns 503 and `bridgehead status` exits non-zero once
// its probes go unanswered; when it comes back, both recover.
func TestOperations(t *testing.T) {
	l := startLab(t, "KEEPALIVE=1s")
	readyz := func() bool {
		_, err := l.exec("a-gw", filepath.Join(l.bin, "bhprobe"), "http-get", "http://127.0.0.1:9641/readyz")
		return err == nil
	}
	// With keepalives configured the gateways set up their session and
	// turn ready without any traffic.
	start := time.Now()
	for !readyz() {
		if time.Since(start) > 10*time.Second {
			t.Fatal("not ready 10 s after start without traffic, keepalive 1s")
		}
		time.Sleep(200 * time.Millisecond)
	}
	series := `bridgehead_peer_sent_bytes_total{gateway="gw-b1",site="site-b"}`
	before := metric(l.metrics("a"), series)
	l.transfer("a-node", podA, "b-node", podB, 7020, 8<<20)
	if after := metric(l.metrics("a"), series); after < before+8<<20 {
		t.Fatalf("%s moved from %v to %v for an 8 MiB transfer", series, before, after)
	}

	status := func() (string, int) {
		cmd := exec.Command(filepath.Join(l.bin, "bridgehead"), "status", "--socket", filepath.Join(l.dir, "a.sock"))
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); ok {
			return string(out), ee.ExitCode()
		}
		if err != nil {
			t.Fatal(err)
		}
		return string(out), 0
	}
	waitUntil := func(what string, limit time.Duration, cond func() bool) time.Duration {
		t.Helper()
		start := time.Now()
		for !cond() {
			if time.Since(start) > limit {
				t.Fatalf("%s: not within %s", what, limit)
			}
			time.Sleep(200 * time.Millisecond)
		}
		return time.Since(start)
	}
	waitUntil("ready at start", 10*time.Second, readyz)
	if out, code := status(); code != 0 || !strings.Contains(out, "up") {
		t.Fatalf("status exit %d:\n%s", code, out)
	}

	// Stop gateway B (SIGSTOP: up but not forwarding, the case that
	// fools peers' health checks).
	pidB := l.gatewayPID("b")
	if err := syscall.Kill(pidB, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	defer func() {
		if !resumed {
			syscall.Kill(pidB, syscall.SIGCONT)
		}
	}()
	took := waitUntil("readyz 503 after the peer stopped", 15*time.Second, func() bool { return !readyz() })
	t.Logf("readyz went 503 %s after the peer stopped", took.Round(100*time.Millisecond))
	out, code := status()
	if code == 0 {
		t.Fatalf("status exit 0 with the peer down:\n%s", out)
	}
	if !strings.Contains(out, "site-b") {
		t.Fatalf("status does not name the failing site:\n%s", out)
	}
	syscall.Kill(pidB, syscall.SIGCONT)
	resumed = true
	took = waitUntil("ready again", 15*time.Second, readyz)
	t.Logf("ready again %s after the peer resumed", took.Round(100*time.Millisecond))
	if _, code := status(); code != 0 {
		t.Fatalf("status still failing after recovery (exit %d)", code)
	}
}

// TestPeerRestart: gateway B is killed and started again (new ephemeral
// keys, counters from zero); traffic from A recovers within 5 s.
func TestPeerRestart(t *testing.T) {
	l := startLab(t)
	l.probe("a-node", "ping", "-src", podA, "-count", "1", podB)
	pidB := l.gatewayPID("b")
	if err := syscall.Kill(pidB, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond)
	restart := exec.Command("ip", "netns", "exec", l.ns("b-gw"), filepath.Join(l.bin, "bridgehead"), "run", "--config", filepath.Join(l.dir, "b.yaml"))
	logf, _ := openAppend(filepath.Join(l.dir, "b.log"))
	restart.Stdout, restart.Stderr = logf, logf
	if err := restart.Start(); err != nil {
		t.Fatal(err)
	}
	appendPID(t, l, restart.Process.Pid)
	start := time.Now()
	// Wait for B's routes, then ping until a reply.
	for {
		out, _ := l.exec("a-node", filepath.Join(l.bin, "bhprobe"), "ping", "-src", podA, "-count", "1", "-timeout", "500ms", podB)
		if strings.Contains(out, "1 received") {
			break
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("traffic did not recover within 5 s of the restart")
		}
	}
	t.Logf("traffic recovered %s after gateway B restarted", time.Since(start).Round(10*time.Millisecond))
}
