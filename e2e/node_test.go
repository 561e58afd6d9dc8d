package e2e

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// nodeLab is the lab of deploy/lab/node-lab.sh with `bridgehead node`
// running on its four nodes ("a-n1", "a-n2", "b-n1", "b-n2").
type nodeLab struct {
	*lab
	plugins string // the CNI reference plugins (CNI_PLUGINS_DIR)
	agents  map[string]*exec.Cmd
}

// cniPluginsDir is where `make cni-plugins` put the reference plugins.
// Missing plugins fail the test in CI and skip it elsewhere.
func cniPluginsDir(t *testing.T) string {
	t.Helper()
	dir := os.Getenv("CNI_PLUGINS_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "bridgehead", "cni-plugins")
	}
	for _, p := range []string{"bridge", "host-local", "portmap", "loopback"} {
		if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
			if os.Getenv("CI") != "" {
				t.Fatalf("CNI plugin %s missing from %s: run make cni-plugins", p, dir)
			}
			t.Skipf("CNI plugin %s missing from %s: run make cni-plugins", p, dir)
		}
	}
	return dir
}

func startNodeLab(t *testing.T, extraEnv ...string) *nodeLab {
	t.Helper()
	requireRoot(t)
	plugins := cniPluginsDir(t)
	nl := &nodeLab{plugins: plugins, agents: map[string]*exec.Cmd{}}
	prefix := fmt.Sprintf("bhn-%d", os.Getpid()%100000)
	if p := os.Getenv("E2E_PREFIX"); p != "" { // several people or agents sharing a machine
		prefix = fmt.Sprintf("%sn%d", p, os.Getpid()%100000)
	}
	nl.lab = startLabPrefix(t, "deploy/lab/node-lab.sh", prefix,
		[]string{"a", "b", "a-n1-agent", "a-n2-agent", "b-n1-agent", "b-n2-agent"}, extraEnv...)
	for _, n := range []string{"a-n1", "a-n2", "b-n1", "b-n2"} {
		nl.startAgent(n)
	}
	for _, n := range []string{"a-n1", "a-n2", "b-n1", "b-n2"} {
		nl.waitAgentSynced(n, 1)
	}
	return nl
}

// nodeName is the catalog's name of a lab node ("a-n1" is node-a1).
func nodeName(n string) string { return "node-" + n[:1] + n[len(n)-1:] }

// nodeDir holds a node's CNI conf, bin, cache and IPAM directories.
func (nl *nodeLab) nodeDir(n string) string { return filepath.Join(nl.dir, n) }

// startAgent starts `bridgehead node` in node n, with the node's own CNI
// directories (the plugins are copied in from the cache, as from the
// image), metrics on 127.0.0.1:9643 and a 2 s periodic check.
func (nl *nodeLab) startAgent(n string) {
	nl.t.Helper()
	nl.startAgentBinary(n, filepath.Join(nl.bin, "bridgehead"), "--state-file", filepath.Join(nl.nodeDir(n), "node-state.json"))
}

// startAgentBinary starts binary's `bridgehead node` in node n as
// startAgent does, with the flags every release knows and then extra
// (a release before --state-file gets none).
func (nl *nodeLab) startAgentBinary(n, binary string, extra ...string) {
	nl.t.Helper()
	d := nl.nodeDir(n)
	log, err := openAppend(filepath.Join(nl.dir, n+"-agent.log"))
	if err != nil {
		nl.t.Fatal(err)
	}
	defer log.Close()
	args := append([]string{"netns", "exec", nl.ns(n), binary, "node",
		"--config", filepath.Join(nl.dir, n[:1]+".yaml"), "--node", nodeName(n),
		"--cni-conf-dir", filepath.Join(d, "net.d"), "--cni-bin-dir", filepath.Join(d, "bin"),
		"--cni-plugins-from", nl.plugins, "--ipam-data-dir", filepath.Join(d, "ipam"),
		"--metrics-listen", "127.0.0.1:9643", "--repair-interval", "2s"}, extra...)
	cmd := exec.Command("ip", args...)
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		nl.t.Fatal(err)
	}
	appendPID(nl.t, nl.lab, cmd.Process.Pid)
	nl.agents[n] = cmd
}

// stopAgent stops node n's agent with SIGTERM and waits for it.
func (nl *nodeLab) stopAgent(n string) {
	nl.t.Helper()
	cmd := nl.agents[n]
	cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second): // a failure bound
		cmd.Process.Kill()
		nl.t.Fatalf("agent of %s did not stop on SIGTERM", n)
	}
	delete(nl.agents, n)
}

// agentMetrics scrapes node n's agent.
func (nl *nodeLab) agentMetrics(n string) string {
	nl.t.Helper()
	out, _ := nl.exec(n, filepath.Join(nl.bin, "bhprobe"), "http-get", "http://127.0.0.1:9643/metrics")
	return out
}

// waitAgentSynced waits until node n's agent has finished start syncs.
func (nl *nodeLab) waitAgentSynced(n string, starts float64) {
	nl.t.Helper()
	deadline := time.Now().Add(60 * time.Second) // copying the plugins on a busy CI machine
	for {
		m := nl.agentMetrics(n)
		if metric(m, `bridgehead_node_syncs_total{trigger="start"}`) >= starts && metric(m, "bridgehead_node_cni_config_written") == 1 {
			for _, stage := range []string{"catalog", "cni", "routes", "snat"} {
				if v := metric(m, `bridgehead_node_last_error{stage="`+stage+`"}`); v != 0 {
					nl.t.Fatalf("agent of %s: last_error{stage=%q} = %v", n, stage, v)
				}
			}
			return
		}
		if time.Now().After(deadline) {
			nl.t.Fatalf("agent of %s did not sync; metrics:\n%s", n, m)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// addPod creates a pod namespace on node n and adds it to the network
// through the node's CNI config, as a runtime does. It returns the pod's
// IPv4 and IPv6 addresses.
func (nl *nodeLab) addPod(n, pod string) (string, string) {
	nl.t.Helper()
	ns := nl.ns(n + "-" + pod)
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		nl.t.Fatalf("ip netns add %s: %v %s", ns, err, out)
	}
	f, err := openAppend(filepath.Join(nl.dir, "namespaces"))
	if err != nil {
		nl.t.Fatal(err)
	}
	fmt.Fprintln(f, ns)
	f.Close()
	out := nl.cni(n, pod, "add")
	var v4, v6 string
	for _, m := range regexp.MustCompile(`(?m)^ip (\S+)/\d+$`).FindAllStringSubmatch(out, -1) {
		if strings.Contains(m[1], ":") {
			v6 = m[1]
		} else {
			v4 = m[1]
		}
	}
	if v4 == "" || v6 == "" {
		nl.t.Fatalf("pod %s on %s: no IPv4 and IPv6 address in %q", pod, n, out)
	}
	return v4, v6
}

// cni runs CNI ADD or DEL for a pod of node n.
func (nl *nodeLab) cni(n, pod, op string) string {
	nl.t.Helper()
	d := nl.nodeDir(n)
	return nl.mustExec(n, filepath.Join(nl.bin, "bhprobe"), "cni", op,
		"-conf-dir", filepath.Join(d, "net.d"), "-bin-dir", filepath.Join(d, "bin"),
		"-cache-dir", filepath.Join(d, "cache"), "-netns", "/var/run/netns/"+nl.ns(n+"-"+pod), "-id", pod)
}

// nodeState is what the agent owns on a node, as the kernel shows it.
func (nl *nodeLab) nodeState(n string) string {
	nl.t.Helper()
	var b strings.Builder
	b.WriteString(nl.mustExec(n, "ip", "route", "show", "proto", "66"))
	b.WriteString(nl.mustExec(n, "ip", "-6", "route", "show", "proto", "66"))
	b.WriteString(nl.mustExec(n, "nft", "list", "table", "inet", "bridgehead-node"))
	return b.String()
}

// hostOf strips the port of host:port.
func hostOf(t *testing.T, hp string) string {
	t.Helper()
	ap, err := netip.ParseAddrPort(hp)
	if err != nil {
		t.Fatalf("receiver saw %q: %v", hp, err)
	}
	return ap.Addr().String()
}

// TestNodeAgent: two sites of two nodes each, every node running
// `bridgehead node` from the catalog; pods made through the CNI config
// with the reference plugins talk across sites and within a site, reach
// the internet with their node's address, and keep their own toward
// other pods. Restarts change nothing, a deleted route comes back, CNI
// DEL releases the address, a node that leaves is withdrawn, and
// --uninstall removes what the agent owns.
func TestNodeAgent(t *testing.T) {
	nl := startNodeLab(t)
	a1, a1v6 := nl.addPod("a-n1", "p1")
	a2, a2v6 := nl.addPod("a-n2", "p1")
	b1, b1v6 := nl.addPod("b-n1", "p1")
	t.Logf("pods: a1 %s %s, a2 %s %s, b1 %s %s", a1, a1v6, a2, a2v6, b1, b1v6)

	t.Run("ping", func(t *testing.T) {
		for _, dst := range []string{b1, b1v6, a2, a2v6} {
			nl.probe("a-n1-p1", "ping", "-count", "3", "-allow-loss", "1", dst)
		}
	})
	t.Run("transfer", func(t *testing.T) {
		port := 7100
		for _, c := range []struct{ to, src, dst string }{
			{"b-n1-p1", a1, b1}, {"b-n1-p1", a1v6, b1v6}, // across sites, through the gateways
			{"a-n2-p1", a1, a2}, {"a-n2-p1", a1v6, a2v6}, // within the site, direct
		} {
			from := nl.transfer("a-n1-p1", c.src, c.to, c.dst, port, 10<<20)
			if got := hostOf(t, from); got != c.src {
				t.Errorf("pod %s saw the sender as %s, want the pod address %s (no SNAT between pods)", c.dst, got, c.src)
			}
			port++
		}
	})
	t.Run("egress", func(t *testing.T) {
		for i, c := range []struct{ src, dst, node string }{
			{a1, "198.51.100.100", "10.224.0.11"},
			{a1v6, "2001:db8:100::100", "fd00:224::11"},
		} {
			from := nl.transfer("a-n1-p1", c.src, "inet", c.dst, 7200+i, 1<<20)
			if got := hostOf(t, from); got != c.node {
				t.Errorf("the internet saw pod %s as %s, want its node's address %s", c.src, got, c.node)
			}
		}
	})
	t.Run("restart changes nothing", func(t *testing.T) {
		conf := filepath.Join(nl.nodeDir("a-n1"), "net.d", "05-bridgehead.conflist")
		before, st := nl.nodeState("a-n1"), stat(t, conf)
		nl.stopAgent("a-n1")
		nl.startAgent("a-n1")
		nl.waitAgentSynced("a-n1", 1)
		m := nl.agentMetrics("a-n1")
		for _, series := range []string{
			`bridgehead_node_route_changes_total{op="add"}`, `bridgehead_node_route_changes_total{op="replace"}`,
			`bridgehead_node_route_changes_total{op="delete"}`, "bridgehead_node_snat_table_writes_total",
			"bridgehead_node_cni_config_writes_total", "bridgehead_node_cni_plugins_installed_total",
		} {
			if v := metric(m, series); v != 0 {
				t.Errorf("after a restart %s = %v, want 0", series, v)
			}
		}
		if after := nl.nodeState("a-n1"); after != before {
			t.Errorf("node state changed across a restart:\nbefore\n%s\nafter\n%s", before, after)
		}
		if st2 := stat(t, conf); !st2.ModTime().Equal(st.ModTime()) {
			t.Error("the CNI config was rewritten on restart")
		}
		nl.probe("a-n1-p1", "ping", "-count", "2", b1)
	})
	t.Run("deleted route repaired", func(t *testing.T) {
		times := nl.measureRepair("a-n1", "10.245.0.0/16", 20)
		sort.Slice(times, func(i, j int) bool { return times[i] < times[j] })
		t.Logf("route repair after `ip route del`, %d runs: min %v, median %v, max %v",
			len(times), times[0], times[len(times)/2], times[len(times)-1])
		nl.probe("a-n1-p1", "ping", "-count", "2", b1)
	})
	t.Run("CNI DEL releases the address", func(t *testing.T) {
		v4, v6 := nl.addPod("a-n2", "p2")
		ipam := filepath.Join(nl.nodeDir("a-n2"), "ipam", "bridgehead")
		for _, a := range []string{v4, v6} {
			if _, err := os.Stat(filepath.Join(ipam, a)); err != nil {
				t.Fatalf("host-local has no reservation for %s: %v", a, err)
			}
		}
		nl.cni("a-n2", "p2", "del")
		for _, a := range []string{v4, v6} {
			if _, err := os.Stat(filepath.Join(ipam, a)); !os.IsNotExist(err) {
				t.Errorf("%s still reserved after CNI DEL (%v)", a, err)
			}
		}
	})
	t.Run("node leaves", func(t *testing.T) {
		path := filepath.Join(nl.dir, "a.yaml")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var kept []string
		for _, line := range strings.Split(string(b), "\n") {
			if !strings.Contains(line, "name: node-a2") {
				kept = append(kept, line)
			}
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(strings.Join(kept, "\n")), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(20 * time.Second)
		for strings.Contains(nl.nodeState("a-n1"), "10.244.2.0/24") {
			if time.Now().After(deadline) {
				t.Fatalf("route to node-a2's pods not withdrawn:\n%s", nl.nodeState("a-n1"))
			}
			time.Sleep(50 * time.Millisecond)
		}
		if !strings.Contains(nl.nodeState("a-n1"), "10.245.0.0/16") {
			t.Error("the other routes went too")
		}
	})
	t.Run("uninstall", func(t *testing.T) {
		nl.stopAgent("a-n1")
		d := nl.nodeDir("a-n1")
		nl.mustExec("a-n1", filepath.Join(nl.bin, "bridgehead"), "node", "--uninstall", "--cni-conf-dir", filepath.Join(d, "net.d"), "--state-file", filepath.Join(d, "node-state.json"))
		if out := nl.mustExec("a-n1", "ip", "route", "show", "proto", "66") + nl.mustExec("a-n1", "ip", "-6", "route", "show", "proto", "66"); out != "" {
			t.Errorf("routes left after --uninstall:\n%s", out)
		}
		if out, err := nl.exec("a-n1", "nft", "list", "table", "inet", "bridgehead-node"); err == nil {
			t.Errorf("table left after --uninstall:\n%s", out)
		}
		if _, err := os.Stat(filepath.Join(d, "net.d", "05-bridgehead.conflist")); !os.IsNotExist(err) {
			t.Errorf("CNI config left after --uninstall (%v)", err)
		}
	})
}

func stat(t *testing.T, path string) os.FileInfo {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// measureRepair deletes the agent's route to dst in node n runs times and
// returns how long each took to come back, polled through netlink.
func (nl *nodeLab) measureRepair(n, dst string, runs int) []time.Duration {
	nl.t.Helper()
	ns, err := netns.GetFromName(nl.ns(n))
	if err != nil {
		nl.t.Fatal(err)
	}
	defer ns.Close()
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		nl.t.Fatal(err)
	}
	defer h.Close()
	p := netip.MustParsePrefix(dst)
	find := func() *netlink.Route {
		rs, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Protocol: 66}, netlink.RT_FILTER_PROTOCOL)
		if err != nil {
			nl.t.Fatal(err)
		}
		i := slices.IndexFunc(rs, func(r netlink.Route) bool { return r.Dst != nil && r.Dst.String() == p.String() })
		if i < 0 {
			return nil
		}
		return &rs[i]
	}
	var out []time.Duration
	for range runs {
		r := find()
		if r == nil {
			nl.t.Fatalf("no route to %s in %s", dst, n)
		}
		if err := h.RouteDel(r); err != nil {
			nl.t.Fatal(err)
		}
		start := time.Now()
		for find() == nil {
			if time.Since(start) > 10*time.Second { // a failure bound
				nl.t.Fatalf("route to %s not repaired within 10s", dst)
			}
			time.Sleep(200 * time.Microsecond)
		}
		out = append(out, time.Since(start))
		time.Sleep(50 * time.Millisecond)
	}
	return out
}
