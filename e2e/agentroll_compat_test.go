package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestAgentRollFromPreviousRelease: the node agent of a-n1 is rolled
// from the previous release's `bridgehead node` (CHANGELOG.md's, built
// from its commit by releaseBinaries) to this tree's, under the 1 kHz
// streams of TestAgentRoll. The previous release configures the node
// from nothing (what this tree's agent left is uninstalled first) and
// writes no state file, so the current agent meets the node as schema 1
// and must adopt it as it is: no route, nftables table or CNI config
// rewritten, the same nftables handles, and no datagram lost (except, on
// the cross-site stream, what the gateways' own drop counters account
// for, as in TestAgentRoll).
func TestAgentRollFromPreviousRelease(t *testing.T) {
	requireRoot(t)
	binaries(t) // built once per test binary: not this test's time
	rel, relBin := previousReleaseBinaries(t)
	began := time.Now()
	nl := startNodeLab(t)

	// a-n1 becomes a node the previous release set up: this tree's
	// agent, started by the lab, leaves and takes what it made with it.
	const n = "a-n1"
	d := nl.nodeDir(n)
	state := filepath.Join(d, "node-state.json")
	nl.stopAgent(n)
	nl.mustExec(n, filepath.Join(nl.bin, "bridgehead"), "node", "--uninstall",
		"--cni-conf-dir", filepath.Join(d, "net.d"), "--state-file", state)
	if left := nl.agentOwned(n).kernel; left != "" {
		t.Fatalf("after --uninstall the node still has:\n%s", left)
	}
	started := time.Now()
	nl.startAgentBinary(n, filepath.Join(relBin, "bridgehead"))
	nl.waitAgentSynced(n, 1)
	if _, ok := nl.agentLog(n, "version="+rel.version, started); !ok {
		t.Fatalf("the agent started on %s did not log version %s", n, rel.version)
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Fatalf("the %s agent wrote a state file (%v): this test is for a release before it", rel.version, err)
	}

	streams := nl.startRollStreams(7310)

	before := nl.agentOwned(n)
	nl.stopAgent(n)
	start := time.Now()
	nl.startAgent(n)
	nl.waitAgentSynced(n, 1)
	adopted := time.Since(start)
	nl.checkAdopted(t, n, before, start, "adopting the "+rel.version+" agent's node")

	streams.wait()
	t.Logf("roll %s → this tree at %s", rel.version, start.UTC().Format("15:04:05.000"))
	streams.check(t, "the roll from "+rel.version)
	t.Logf("roll %s (no state file) → this tree (schema 2): new agent synced %s after its start, nothing rewritten", rel.version, adopted.Round(time.Millisecond))
	t.Logf("test took %s without the builds (lab teardown follows)", time.Since(began).Round(100*time.Millisecond))
}

// agentOwned is what an agent owns on a node: its routes and its
// nftables table as the kernel lists them, with the rules' handles (a
// table written again gets new ones), and its CNI config's file.
type agentOwned struct {
	kernel string
	conf   os.FileInfo // nil when there is none
}

func (nl *nodeLab) agentOwned(n string) agentOwned {
	nl.t.Helper()
	o := agentOwned{kernel: nl.mustExec(n, "ip", "route", "show", "proto", "66") + nl.mustExec(n, "ip", "-6", "route", "show", "proto", "66")}
	// A node no agent set up has no table: nft fails, and that is none.
	if table, err := nl.exec(n, "nft", "-a", "list", "table", "inet", "bridgehead-node"); err == nil {
		o.kernel += table
	}
	o.conf, _ = os.Stat(filepath.Join(nl.nodeDir(n), "net.d", "05-bridgehead.conflist"))
	return o
}

// checkAdopted is the proof that the agent started at start on node n
// adopted what the agent before it left (before): it changed no route,
// wrote neither the SNAT table nor the CNI config (the same nftables
// handles, the same file), said it adopted the node, and wrote its own
// state schema.
func (nl *nodeLab) checkAdopted(t *testing.T, n string, before agentOwned, start time.Time, what string) {
	t.Helper()
	m := nl.agentMetrics(n)
	for _, series := range []string{
		`bridgehead_node_route_changes_total{op="add"}`, `bridgehead_node_route_changes_total{op="replace"}`,
		`bridgehead_node_route_changes_total{op="delete"}`, "bridgehead_node_snat_table_writes_total",
		"bridgehead_node_cni_config_writes_total",
	} {
		if v := metric(m, series); v != 0 {
			t.Errorf("%s: %s = %v, want 0", what, series, v)
		}
	}
	after := nl.agentOwned(n)
	if after.kernel != before.kernel {
		t.Errorf("%s: routes or nftables handles changed across the roll:\nbefore\n%s\nafter\n%s", what, before.kernel, after.kernel)
	}
	switch {
	case before.conf == nil:
		t.Errorf("%s: there was no CNI config before the roll", what)
	case after.conf == nil:
		t.Errorf("%s: the CNI config is gone", what)
	case !after.conf.ModTime().Equal(before.conf.ModTime()):
		t.Errorf("%s: the CNI config was rewritten", what)
	}
	waitFile(t, filepath.Join(nl.nodeDir(n), "node-state.json"), `"schema": 2`)
	const adopted = "adopted the node as the previous agent left it"
	if _, ok := nl.agentLog(n, adopted, start); !ok {
		t.Errorf("%s: the new agent did not say it adopted the node", what)
		return
	}
	b, _ := os.ReadFile(filepath.Join(nl.dir, n+"-agent.log"))
	lines := strings.Split(string(b), "\n")
	for i := len(lines) - 1; i >= 0; i-- {
		if strings.Contains(lines[i], adopted) { // this roll's: the last
			t.Logf("%s: %s", what, lines[i])
			break
		}
	}
}
