package controller

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestKubeFailoverScale measures controller failover at the cluster's
// size (issue 34) against the real API server, with two `bridgehead
// controller` processes (so each one's RSS is its own), their default
// lease timings (15 s, 10 s, 0.5 s): BRIDGEHEAD_FAILOVER_SCALE nodes
// (10000 for the issue) as TestKubeCatalogScale makes them.
//
// Replica A leads and allocates every node; replica B follows with warm
// caches. Nodes keep joining, 20 a second (at most 10 a site), through
// both failovers:
//
//   - release: SIGTERM to the leader, which releases the Lease;
//   - expiry: SIGKILL to the new leader (A restarted as the standby),
//     whose Lease the standby takes once it expired.
//
// For each: the stop to the standby's "leading", to its allocator
// rebuilt (a List of every Node from the API server) and to its first
// full reconcile (every Node it knew at the takeover reconciled once:
// "first full reconcile done"). Then every joined node must have a
// range and no two Nodes may record overlapping blocks (the audit, read
// from the API server); the new leader's own audit must not have
// reported any. Both replicas' RSS are logged. It is a benchmark: it
// asserts correctness, not speed.
func TestKubeFailoverScale(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("BRIDGEHEAD_FAILOVER_SCALE"))
	if nodes <= 0 {
		t.Skip("set BRIDGEHEAD_FAILOVER_SCALE=10000 to measure")
	}
	bin := filepath.Join(t.TempDir(), "bridgehead")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bridgehead").CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	h := startKube(t)
	sites := createScaleCluster(t, h, nodes)

	a := startReplica(t, bin, h.env.Kubeconfig, "ctl-a")
	took := a.waitLog(t, 10*time.Minute, `msg="catalog published"`, fmt.Sprintf(" nodes=%d ", nodes))
	t.Logf("A: start -> catalog with all %d nodes: %s", nodes, took.Sub(a.started).Round(time.Millisecond))
	b := startReplica(t, bin, h.env.Kubeconfig, "ctl-b")
	b.waitLog(t, 5*time.Minute, `msg=following`)
	time.Sleep(2 * time.Second)

	// Joins through both failovers.
	var joined atomic.Int64
	stopJoins := make(chan struct{})
	var jwg sync.WaitGroup
	jwg.Go(func() {
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for k := nodes; ; k++ {
			if joined.Load() >= int64(10*sites) { // each site's pool has 64 blocks for 50 nodes
				<-stopJoins
				return
			}
			select {
			case <-stopJoins:
				return
			case <-tick.C:
			}
			name, ip4, ip6 := scaleNode(k, sites)
			if err := h.createNode(context.Background(), name, ip4, ip6); err != nil {
				t.Errorf("join %s: %v", name, err)
				return
			}
			joined.Add(1)
		}
	})

	failover := func(kind string, leader, standby *replica, sig syscall.Signal) {
		leader.logRSS(t, "leader before the "+kind)
		standby.logRSS(t, "standby before the "+kind)
		t0 := time.Now()
		_ = leader.cmd.Process.Signal(sig)
		lead := standby.waitLog(t, 2*time.Minute, `msg=leading`)
		rebuilt := standby.waitLog(t, 2*time.Minute, `msg="allocation state rebuilt from Nodes"`)
		first := standby.waitLog(t, 5*time.Minute, `msg="first full reconcile done"`)
		_ = leader.cmd.Wait()
		t.Logf("%s (%s): stop -> standby leading %s, allocator rebuilt %s (%s), first full reconcile %s (%s)", kind, sig,
			lead.Sub(t0).Round(time.Millisecond), rebuilt.Sub(t0).Round(time.Millisecond), standby.field(`msg="allocation state rebuilt`, "took"),
			first.Sub(t0).Round(time.Millisecond), standby.field(`msg="first full reconcile done"`, "nodes")+" nodes")
		standby.logRSS(t, "new leader after its first full reconcile")
	}
	failover("release", a, b, syscall.SIGTERM)
	time.Sleep(3 * time.Second)
	a2 := startReplica(t, bin, h.env.Kubeconfig, "ctl-a2")
	a2.waitLog(t, 5*time.Minute, `msg=following`)
	time.Sleep(2 * time.Second)
	failover("expiry", b, a2, syscall.SIGKILL)
	time.Sleep(3 * time.Second)
	close(stopJoins)
	jwg.Wait()

	// Every joined node gets a range from the leader, and no block is
	// held twice.
	total := nodes + int(joined.Load())
	waitTrue(t, 2*time.Minute, "every node allocated", func() bool {
		list, err := h.cs.CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
		if err != nil || len(list.Items) != total {
			return false
		}
		for i := range list.Items {
			if list.Items[i].Annotations[AnnotationPodCIDRs] == "" {
				return false
			}
		}
		return true
	})
	blocks := checkNoDuplicates(t, h.cs)
	for _, r := range []*replica{a, b, a2} {
		if l := r.find(`audit: pod blocks held by two nodes`); l != "" {
			t.Errorf("%s: %s", r.id, l)
		}
	}
	t.Logf("%d nodes (%d joined during the failovers), %d blocks, none held twice", total, joined.Load(), blocks)
}

// replica is one `bridgehead controller` process and its log lines,
// each with the time it was read.
type replica struct {
	id      string
	cmd     *exec.Cmd
	started time.Time

	mu    sync.Mutex
	lines []logLine
	more  chan struct{} // closed and replaced on each line
}

type logLine struct {
	at   time.Time
	text string
}

func startReplica(t *testing.T, bin, kubeconfig, id string) *replica {
	t.Helper()
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig, "--namespace", testNS, "--identity", id,
		"--metrics-listen", "", "--kube-api-qps", "1000", "--kube-api-burst", "2000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{id: id, cmd: cmd, more: make(chan struct{})}
	r.started = time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		for sc.Scan() {
			r.mu.Lock()
			r.lines = append(r.lines, logLine{time.Now(), sc.Text()})
			close(r.more)
			r.more = make(chan struct{})
			r.mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		<-done
	})
	return r
}

// waitLog waits for a line holding every one of subs and returns when it
// was read.
func (r *replica) waitLog(t *testing.T, timeout time.Duration, subs ...string) time.Time {
	t.Helper()
	deadline := time.After(timeout)
	seen := 0
	for {
		r.mu.Lock()
		lines, more := r.lines[seen:], r.more
		seen = len(r.lines)
		r.mu.Unlock()
	next:
		for _, l := range lines {
			for _, s := range subs {
				if !strings.Contains(l.text, s) {
					continue next
				}
			}
			return l.at
		}
		select {
		case <-more:
		case <-deadline:
			t.Fatalf("%s: no log line with %q within %s", r.id, subs, timeout)
		}
	}
}

// find is the first line holding sub, "" if none.
func (r *replica) find(sub string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, l := range r.lines {
		if strings.Contains(l.text, sub) {
			return l.text
		}
	}
	return ""
}

// field is key's value in the first line holding sub.
func (r *replica) field(sub, key string) string {
	for _, f := range strings.Fields(r.find(sub)) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return "?"
}

func (r *replica) logRSS(t *testing.T, what string) {
	t.Helper()
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", r.cmd.Process.Pid))
	var mem []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			mem = append(mem, strings.Join(strings.Fields(l), " "))
		}
	}
	t.Logf("%s (%s): %s", r.id, what, strings.Join(mem, ", "))
}
