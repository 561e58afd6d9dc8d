package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestDrainRollingUpgrade: a rolling upgrade of one of site B's two
// gateways in the HA lab, with the gateways' default drain settings. A
// 1 kHz UDP stream runs each way between pod A and pod B (A→B picked by
// gw-a1's liveness among site B's gateways, B→A by node B's ECMP routes,
// which lb-watch keeps to the gateways whose /readyz answers 200), and
// a paced TCP transfer with a checksum runs from A to B. The gateway
// carrying the A→B stream gets SIGTERM, drains and exits; a new process
// of the binary starts in its place and takes its flows back. No
// datagram may be lost or arrive twice, either way, and the TCP transfer
// must arrive intact. gw-a1 must take the carrier down for "draining"
// well before three probe intervals (what a kill costs), and the old
// process must log the drain's steps.
func TestDrainRollingUpgrade(t *testing.T) {
	ab, ba := rollingUpgrade(t, syscall.SIGTERM)
	for _, c := range []struct {
		dir string
		st  flowStats
	}{{"A→B", ab}, {"B→A", ba}} {
		if c.st.Lost != 0 || c.st.Duplicates != 0 || c.st.Received < 13000 {
			t.Errorf("%s stream across the upgrade: %d received, %d lost, %d twice; want none lost or twice",
				c.dir, c.st.Received, c.st.Lost, c.st.Duplicates)
		}
	}
}

// rollingUpgrade runs TestDrainRollingUpgrade's upgrade, stopping the
// carrier with signals (SIGTERM: a drain; SIGTERM then SIGINT: a stop
// at once, as before the drain), and returns the streams' statistics.
// It checks the TCP transfer, and with a drain its log lines and how
// soon gw-a1 moved the flows.
func rollingUpgrade(t *testing.T, signals ...syscall.Signal) (ab, ba flowStats) {
	requireRoot(t)
	binaries(t) // built once per test binary: not this test's time
	began := time.Now()
	drain := len(signals) == 1
	l := startHALab(t)
	l.waitPeers("up", "gw-b1", "gw-b2")
	toB := l.sink(7010)
	toA := l.sinkAt("a-node", "10.244.1.10", 7011)
	_, streamAB := l.bg("a-node", filepath.Join(l.bin, "bhprobe"), "udp-stream", "-src", "10.244.1.10",
		"-rate", "1000", "-duration", "14s", "10.245.1.10:7010")
	_, streamBA := l.bg("b-node", filepath.Join(l.bin, "bhprobe"), "udp-stream", "-src", "10.245.1.10",
		"-rate", "1000", "-duration", "14s", "10.244.1.10:7011")
	time.Sleep(time.Second)
	carrier := busiest(l.txRates(500 * time.Millisecond))
	g := haGateways[carrier]

	_, recvDone := l.bgListening("b-node", filepath.Join(l.bin, "bhprobe"), "tcp-recv", "-listen", "10.245.1.10:5210", "-timeout", "80s")
	_, sendDone := l.bg("a-node", filepath.Join(l.bin, "bhprobe"), "tcp-send", "-src", "10.244.1.10",
		"-bytes", strconv.Itoa(40<<20), "-mbps", "40", "-timeout", "80s", "10.245.1.10:5210")
	time.Sleep(1500 * time.Millisecond)

	// The upgrade: SIGTERM, wait for the old process to drain and exit,
	// start the new one in its place.
	raw, err := os.ReadFile(filepath.Join(l.dir, g.cfg+".pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(raw)))
	termAt := time.Now()
	for _, sig := range signals {
		if err := syscall.Kill(pid, sig); err != nil {
			t.Fatalf("%v %s (pid %d): %v", sig, carrier, pid, err)
		}
	}
	waitExit(t, pid, 40*time.Second)
	exited := time.Since(termAt)
	l.restore(carrier, "kill") // a new process, same binary, key and config
	restarted := time.Now()
	l.waitPeers("up", "gw-b1", "gw-b2")
	back := time.Since(restarted)

	streamAB()
	streamBA()
	sent, received := sendDone(), recvDone()
	ab, ba = toB()["0"], toA()["0"]

	sum := `(\d+) bytes sha256 ([0-9a-f]{64})`
	s, r := regexpFind(sum, sent), regexpFind(sum, received)
	if s == nil || r == nil || s[1] != r[1] || s[2] != r[2] {
		t.Errorf("TCP transfer across the upgrade:\nsender: %s\nreceiver: %s", sent, received)
	}
	// gw-a1 heard that the carrier drains: down for that reason, long
	// before three silent probe intervals.
	downAt, ok := l.logStamp("a1", "gateway draining", termAt)
	if !drain {
		downAt, ok = l.logStamp("a1", "gateways down", termAt)
	}
	if !ok {
		t.Errorf("gw-a1 never logged that %s drains or is down", carrier)
	} else if d := downAt.Sub(termAt); drain && d > 500*time.Millisecond {
		t.Errorf("gw-a1 took %s to move %s's flows after its SIGTERM, want well under 3 probe intervals (600 ms)", d, carrier)
	}
	for _, step := range []string{"drain started", "peers notified", "drained: no data crossed the gateway", "gateway stopping"} {
		if _, ok := l.logStamp(g.cfg, step, termAt); drain && !ok {
			t.Errorf("the old %s did not log %q", carrier, step)
		}
	}
	t.Logf("rolling upgrade of %s: SIGTERM to exit %s; gw-a1 moved its flows %s after SIGTERM; the new process up at gw-a1 %s after its start",
		carrier, exited.Round(time.Millisecond), downAt.Sub(termAt).Round(time.Millisecond), back.Round(time.Millisecond))
	t.Logf("test took %s without the build (lab teardown follows)", time.Since(began).Round(100*time.Millisecond))
	t.Logf("SIGTERM at %s, restart at %s", termAt.UTC().Format("15:04:05.000"), restarted.UTC().Format("15:04:05.000"))
	t.Logf("A→B: %d received, %d lost, longest gap %.1f ms ending %s; B→A: %d received, %d lost, longest gap %.1f ms ending %s; TCP %s",
		ab.Received, ab.Lost, ab.MaxGapMs, ab.GapAt, ba.Received, ba.Lost, ba.MaxGapMs, ba.GapAt, strings.TrimSpace(sent))
	return ab, ba
}

// waitExit waits until process pid is gone (or a zombie, whose parent
// has not reaped it), failing the test after limit.
func waitExit(t *testing.T, pid int, limit time.Duration) {
	t.Helper()
	deadline := time.Now().Add(limit)
	for {
		stat, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
		if err != nil {
			return
		}
		if f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:])); len(f) > 0 && f[0] == "Z" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pid %d still running %s after SIGTERM", pid, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
