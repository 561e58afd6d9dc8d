package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/compare"
)

// TestQuickRun runs bhbench in quick mode for kernel and bridgehead with 2
// s measurements and checks that both carried traffic and that nothing is
// left behind. Root only; in CI (CI set) a missing root or iperf3 fails
// the test instead of skipping it.
func TestQuickRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the benchmark in namespaces (about 40 s)")
	}
	ci := os.Getenv("CI") != ""
	if os.Geteuid() != 0 {
		if ci {
			t.Fatal("TestQuickRun needs root; CI runs as root")
		}
		t.Skip("needs root (network namespaces, TUN)")
	}
	if _, err := exec.LookPath("iperf3"); err != nil {
		if ci {
			t.Fatal("iperf3 missing: apt-get install -y iperf3")
		}
		t.Skip("iperf3 missing (apt-get install -y iperf3)")
	}

	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	bin := t.TempDir()
	for pkg, name := range map[string]string{"./cmd/bridgehead": "bridgehead", "./bench/cmd/bhbench": "bhbench"} {
		c := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		c.Dir = root
		if out, err := c.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}

	out := filepath.Join(t.TempDir(), "results")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c := exec.CommandContext(ctx, filepath.Join(bin, "bhbench"), "--quick", "-modes", "kernel,bridgehead", "-duration", "2s", "-bin", bin, "-out", out)
	c.Dir = root
	var log strings.Builder
	c.Stdout, c.Stderr = &log, &log
	err := c.Run()
	t.Logf("bhbench output:\n%s", log.String())
	if err != nil {
		t.Fatalf("bhbench: %v", err)
	}
	// Its namespaces are named after its PID: none may remain.
	if c.Process != nil {
		entries, _ := os.ReadDir("/run/netns")
		prefix := "bhb" + strconv.Itoa(c.Process.Pid) + "-"
		for _, e := range entries {
			if strings.HasPrefix(e.Name(), prefix) {
				t.Errorf("namespace %s left behind", e.Name())
			}
		}
	}

	b, err := os.ReadFile(filepath.Join(out, "results.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep compare.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, v := range []string{"kernel", "bridgehead-aesgcm"} {
		m, ok := rep.Medians[v]
		if !ok {
			t.Errorf("no results for %s", v)
			continue
		}
		for _, k := range []string{compare.MTCP1, compare.MTCPN, compare.MTCPRev, compare.MUDPPPS} {
			if m[k] <= 0 {
				t.Errorf("%s %s = %g, want > 0", v, k, m[k])
			}
		}
		if rep.OKRuns[v] != 1 {
			t.Errorf("%s: %d runs completed, want 1", v, rep.OKRuns[v])
		}
	}
	if m := rep.Medians["bridgehead-aesgcm"]; m[compare.MCPUA] <= 0 || m[compare.MCPUB] <= 0 {
		t.Errorf("bridgehead gateway CPU per GB: A %g, B %g; want > 0", m[compare.MCPUA], m[compare.MCPUB])
	}
	for _, name := range []string{"results.md", "results.svg"} {
		if st, err := os.Stat(filepath.Join(out, name)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestGatewaySchedFlag: a bad -gateway-sched, -express-priority or -lanes is
// refused before anything starts, naming the flag; with -flood both are
// refused.
func TestGatewaySchedFlag(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-gateway-sched", "fifo:0"}, `-gateway-sched: scheduling policy "fifo:0": priority "0" is not 1..99`},
		{[]string{"-gateway-sched", "idle:1"}, `unknown policy "idle"`},
		{[]string{"-flood", "-gateway-sched", "fifo:10"}, "-gateway-sched is a control of the mode comparison"},
		{[]string{"-express-priority", "100"}, `-express-priority: "100" is neither default nor a priority 0..99`},
		{[]string{"-express-priority", "0,x"}, `-express-priority: "x" is neither default nor a priority 0..99`},
		{[]string{"-lanes", "2,0"}, `-lanes: "0" is not a lane count 1..64`},
		{[]string{"-lanes", "65"}, `-lanes: "65" is not a lane count 1..64`},
		{[]string{"-flood", "-express-priority", "10"}, "-express-priority makes columns of the mode comparison"},
	} {
		var out, errb strings.Builder
		if code := run(tc.args, &out, &errb); code == 0 || !strings.Contains(errb.String(), tc.want) {
			if tc.args[0] == "-flood" && os.Geteuid() != 0 {
				continue // refused earlier, for want of root
			}
			t.Errorf("bhbench %q: exit %d, stderr %q; want non-zero and %q", tc.args, code, errb.String(), tc.want)
		}
	}
}
