package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestAgentRoll: the node agent of a-n1 is rolled twice while 1 kHz UDP
// streams run through everything it owns there: from its pod to a pod of
// a-n2 (its route to a-n2's pod block), from that pod back to it (its
// bridge, made by its CNI config) and from its pod to the internet (its
// SNAT table); a fourth goes to a pod of site B, through the gateways. First a new agent process starts on a host whose state an
// agent before versioned state left (no state file: schema 1): it must
// adopt the routes, table and CNI config as they are (the same nftables
// handles, no route change, no rewrite), say so, and write its own
// schema. Then a newer agent's state file is put in place (a rollback):
// the agent must leave the node alone and report it. No stream may lose
// a datagram, except the cross-site one in the gateways' queues (their
// drop counters say how many: on a loaded machine a -race gateway's fair
// queue expires a few while it waits for a CPU, with or without a roll).
func TestAgentRoll(t *testing.T) {
	requireRoot(t)
	binaries(t) // built once per test binary: not this test's time
	began := time.Now()
	nl := startNodeLab(t)
	streams := nl.startRollStreams(7300)

	state := filepath.Join(nl.nodeDir("a-n1"), "node-state.json")
	before := nl.agentOwned("a-n1")

	// Roll 1: from an agent before versioned state.
	nl.stopAgent("a-n1")
	if err := os.Remove(state); err != nil {
		t.Fatalf("the agent kept no state file: %v", err)
	}
	start := time.Now()
	start1 := start
	nl.startAgent("a-n1")
	nl.waitAgentSynced("a-n1", 1)
	adopted := time.Since(start)
	nl.checkAdopted(t, "a-n1", before, start, "adopting a schema-1 node")

	// Roll 2: a rollback, onto a newer agent's state.
	nl.stopAgent("a-n1")
	newer := `{"schema": 99, "agent": "v99.0.0"}` + "\n"
	if err := os.WriteFile(state, []byte(newer), 0o644); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	nl.startAgent("a-n1")
	for deadline := time.Now().Add(30 * time.Second); metric(nl.agentMetrics("a-n1"), `bridgehead_node_last_error{stage="state"}`) != 1; {
		if time.Now().After(deadline) {
			t.Fatalf("the agent did not report the newer state:\n%s", nl.agentMetrics("a-n1"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after := nl.agentOwned("a-n1"); after.kernel != before.kernel {
		t.Errorf("the node changed under a newer agent's state:\nbefore\n%s\nafter\n%s", before.kernel, after.kernel)
	}
	if b, _ := os.ReadFile(state); string(b) != newer {
		t.Errorf("the newer agent's state file was rewritten: %s", b)
	}
	if _, ok := nl.agentLog("a-n1", "node state written by a newer agent (schema 99", start); !ok {
		t.Error("the agent did not log the newer state")
	}

	streams.wait()
	t.Logf("rolls at %s and %s", start1.UTC().Format("15:04:05.000"), start.UTC().Format("15:04:05.000"))
	streams.check(t, "two agent rolls")
	t.Logf("roll 1 (schema 1 → 2): new agent synced %s after its start, nothing rewritten", adopted.Round(time.Millisecond))
	t.Logf("test took %s without the build (lab teardown follows)", time.Since(began).Round(100*time.Millisecond))
}

// agentLog finds a line of node n's agent log containing msg, stamped
// after since (logStamp's rule).
func (nl *nodeLab) agentLog(n, msg string, since time.Time) (time.Time, bool) {
	return nl.logStamp(n+"-agent", msg, since)
}

// waitFile waits until the file at path contains s.
func waitFile(t *testing.T, path, s string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, _ := os.ReadFile(path); strings.Contains(string(b), s) {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(path)
			t.Fatalf("%s lacks %q: %s", path, s, b)
		}
	}
}

// droppedTotal sums a gateway scrape's bridgehead_dropped_packets_total.
func droppedTotal(scrape string) float64 {
	sum := 0.0
	for _, m := range regexp.MustCompile(`(?m)^bridgehead_dropped_packets_total\{[^}]*\} (\S+)$`).FindAllStringSubmatch(scrape, -1) {
		v, _ := strconv.ParseFloat(m[1], 64)
		sum += v
	}
	return sum
}

// rollStreams are the four 1 kHz pod streams an agent roll on a-n1 runs
// under: a-n1 → a-n2 and back (the node's bridge and routes), a-n1 → the
// internet (its SNAT) and a-n1 → b-n1 (through the gateways).
type rollStreams struct {
	toA2, toA1, toInet, toB func() map[string]flowStats
	gwDrops                 func() float64
	drops0                  float64
	waits                   []func()
}

// startRollStreams adds the pods, their sinks on ports port..port+3 and
// starts the 10 s streams, a second before it returns.
func (nl *nodeLab) startRollStreams(port int) *rollStreams {
	a1, _ := nl.addPod("a-n1", "p1")
	a2, _ := nl.addPod("a-n2", "p1")
	b1, _ := nl.addPod("b-n1", "p1")
	s := &rollStreams{
		toA2:   nl.sinkAt("a-n2-p1", a2, port),
		toA1:   nl.sinkAt("a-n1-p1", a1, port+1),
		toInet: nl.sinkAt("inet", "198.51.100.100", port+2),
		toB:    nl.sinkAt("b-n1-p1", b1, port+3),
	}
	s.gwDrops = func() float64 { return droppedTotal(nl.metrics("a")) + droppedTotal(nl.metrics("b")) }
	s.drops0 = s.gwDrops()
	stream := func(ns, src, dst string) func() {
		_, wait := nl.bg(ns, filepath.Join(nl.bin, "bhprobe"), "udp-stream", "-src", src, "-rate", "1000", "-duration", "10s", dst)
		return func() { wait() }
	}
	s.waits = []func(){
		stream("a-n1-p1", a1, joinHostPort(a2, port)),
		stream("a-n2-p1", a2, joinHostPort(a1, port+1)),
		stream("a-n1-p1", a1, joinHostPort("198.51.100.100", port+2)),
		stream("a-n1-p1", a1, joinHostPort(b1, port+3)),
	}
	time.Sleep(time.Second)
	return s
}

// wait waits until every stream has ended.
func (s *rollStreams) wait() {
	for _, w := range s.waits {
		w()
	}
}

// check reports the streams and fails t for any datagram lost on the
// node's own paths, or lost across the gateways beyond what their drop
// counters account for (a loaded -race gateway's fair queue expires a
// few).
func (s *rollStreams) check(t *testing.T, across string) {
	t.Helper()
	for _, c := range []struct {
		what string
		st   flowStats
	}{{"pod a-n1 → pod a-n2", s.toA2()["0"]}, {"pod a-n2 → pod a-n1", s.toA1()["0"]}, {"pod a-n1 → internet (SNAT)", s.toInet()["0"]}} {
		t.Logf("%s: %d received, %d lost, longest gap %.1f ms ending %s", c.what, c.st.Received, c.st.Lost, c.st.MaxGapMs, c.st.GapAt)
		if c.st.Lost != 0 || c.st.Received < 9000 {
			t.Errorf("%s across %s: %d received, %d lost; want none lost", c.what, across, c.st.Received, c.st.Lost)
		}
	}
	cross, dropped := s.toB()["0"], s.gwDrops()-s.drops0
	t.Logf("pod a-n1 → pod b-n1 (through the gateways): %d received, %d lost, longest gap %.1f ms ending %s; the gateways dropped %.0f packets meanwhile",
		cross.Received, cross.Lost, cross.MaxGapMs, cross.GapAt, dropped)
	if float64(cross.Lost) > dropped || cross.Received < 9000 {
		t.Errorf("pod a-n1 → pod b-n1 across %s: %d received, %d lost, more than the %.0f the gateways dropped", across, cross.Received, cross.Lost, dropped)
	}
}
