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
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/kube/catalog"
)

// TestKubeCatalogScale measures the scale figures against the
// real API server, with `bridgehead controller` as its own process (so
// its RSS is its own): BRIDGEHEAD_CATALOG_SCALE nodes (10000 for the
// issue) over one site per 50 nodes, dual-stack, two gateways a site.
//
//   - cold: the Nodes exist without pod blocks; the controller starts,
//     allocates every block and publishes: process start to the first
//     catalog holding every node;
//   - restart: the same controller started again (every node allocated):
//     process start (full List of Nodes, Sites, Gateways, ConfigMaps) to
//     the first complete catalog, and its writes (none expected).
//
// Each phase logs the controller's peak and current RSS (VmHWM, VmRSS).
// It is a benchmark: it asserts completeness, not speed.
func TestKubeCatalogScale(t *testing.T) {
	nodes, _ := strconv.Atoi(os.Getenv("BRIDGEHEAD_CATALOG_SCALE"))
	if nodes <= 0 {
		t.Skip("set BRIDGEHEAD_CATALOG_SCALE=10000 to measure")
	}
	sites := max(nodes/50, 1)
	bin := filepath.Join(t.TempDir(), "bridgehead")
	build := exec.Command("go", "build", "-o", bin, "../cmd/bridgehead")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	h := startKube(t)
	createScaleCluster(t, h, nodes)
	ctx := context.Background()

	for _, phase := range []string{"cold", "restart"} {
		runScalePhase(t, bin, h.env.Kubeconfig, phase, nodes)
	}
	// The catalog, read as the gateways do: every node once.
	list, err := h.cs.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{LabelSelector: catalog.CatalogLabel})
	if err != nil {
		t.Fatal(err)
	}
	var base *corev1.ConfigMap
	slices := map[string]*corev1.ConfigMap{}
	largest, total := 0, 0
	for i := range list.Items {
		cm := &list.Items[i]
		slices[cm.Name] = cm
		if cm.Name == catalog.BaseName {
			base = cm
			continue
		}
		largest = max(largest, catalog.Size(cm))
		total += catalog.Size(cm)
	}
	seen := map[string]bool{}
	for i := range sites {
		all, err := catalog.Assemble(base, slices, fmt.Sprintf("site-%03d", i))
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all[i].Nodes {
			if seen[n.Name] {
				t.Fatalf("node %s twice", n.Name)
			}
			seen[n.Name] = true
		}
		if i == 0 && len(all) != sites {
			t.Fatalf("%d sites in the catalog, want %d", len(all), sites)
		}
	}
	if len(seen) != nodes {
		t.Fatalf("%d nodes in the catalog, want %d", len(seen), nodes)
	}
	t.Logf("catalog: %d ConfigMaps; base %d bytes; slices: largest %d bytes, %d in all", len(list.Items), catalog.Size(base), largest, total)
}

// createScaleCluster creates one Site per 50 nodes (at least one),
// dual-stack with two Gateways each, and the nodes (no pod blocks yet)
// with scaleNode's names and addresses, 32 creates at a time. It
// returns the number of sites.
func createScaleCluster(t *testing.T, h *kubeHarness, nodes int) int {
	t.Helper()
	sites := max(nodes/50, 1)
	t0 := time.Now()
	for i := range sites {
		name := fmt.Sprintf("site-%03d", i)
		h.createSite(t, name, []string{fmt.Sprintf("10.%d.%d.0/20", i/16, i%16*16), fmt.Sprintf("fd00:%x::/64", i)},
			[]string{fmt.Sprintf("100.%d.%d.0/18", 64+i/4, i%4*64), fmt.Sprintf("fd10:%x::/64", i)}, 24, 80)
		for j := 1; j <= 2; j++ {
			h.createGateway(t, name, fmt.Sprintf("gw%d", j), fmt.Sprintf("10.%d.%d.%d", i/16, i%16*16, j), fmt.Sprintf("198.18.%d.%d:51820", i/250, i%250+j))
		}
	}
	ctx := context.Background()
	createParallel(t, nodes, 32, func(k int) error {
		name, ip4, ip6 := scaleNode(k, sites)
		return h.createNode(ctx, name, ip4, ip6)
	})
	t.Logf("created %d Sites, %d Gateways, %d Nodes in %s", sites, 2*sites, nodes, time.Since(t0).Round(time.Millisecond))
	return sites
}

// scaleNode is node k of createScaleCluster's cluster of sites sites:
// its name and InternalIPs (site k%sites, the (k/sites)-th address of
// each of its node CIDRs).
func scaleNode(k, sites int) (string, string, string) {
	s, idx := k%sites, k/sites
	return fmt.Sprintf("node-%05d", k), fmt.Sprintf("10.%d.%d.%d", s/16, s%16*16+1+idx/250, idx%250+1), fmt.Sprintf("fd00:%x::%x", s, idx+10)
}

// runScalePhase runs `bridgehead controller` until it publishes a catalog
// holding every node, logs how long that took and its RSS, and stops it.
func runScalePhase(t *testing.T, bin, kubeconfig, phase string, nodes int) {
	t.Helper()
	cmd := exec.Command(bin, "controller", "--kubeconfig", kubeconfig, "--namespace", testNS, "--leader-elect=false",
		"--metrics-listen", "", "--kube-api-qps", "1000", "--kube-api-burst", "2000")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan time.Duration, 1)
	var logMu sync.Mutex
	var lines []string
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 1<<20), 1<<20)
		want := fmt.Sprintf(" nodes=%d ", nodes)
		signalled := false
		for sc.Scan() {
			l := sc.Text()
			if strings.Contains(l, "caches synced") || strings.Contains(l, "rebuilt") || strings.Contains(l, "catalog published") {
				logMu.Lock()
				lines = append(lines, fmt.Sprintf("+%s %s", time.Since(start).Round(time.Millisecond), l))
				logMu.Unlock()
			}
			if !signalled && strings.Contains(l, `msg="catalog published"`) && strings.Contains(l, want) {
				signalled = true
				done <- time.Since(start)
			}
		}
	}()
	var took time.Duration
	select {
	case took = <-done:
	case <-time.After(10 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatalf("%s: no complete catalog within 10 minutes", phase)
	}
	status, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", cmd.Process.Pid))
	var mem []string
	for _, l := range strings.Split(string(status), "\n") {
		if strings.HasPrefix(l, "VmHWM") || strings.HasPrefix(l, "VmRSS") {
			mem = append(mem, strings.Join(strings.Fields(l), " "))
		}
	}
	// A second more of publications (there should be none).
	time.Sleep(1500 * time.Millisecond)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
	logMu.Lock()
	defer logMu.Unlock()
	for _, l := range lines {
		t.Logf("%s: %s", phase, l)
	}
	t.Logf("%s: process start -> catalog with all %d nodes published: %s; %s", phase, nodes, took.Round(time.Millisecond), strings.Join(mem, ", "))
}
