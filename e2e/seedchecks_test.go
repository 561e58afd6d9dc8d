package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
	bhverify "github.com/bridgehead/bridgehead/verify"
)

// Addresses of the seed-check lab: a ClusterIP per Service, and the
// "internet" host that node B's uplink reaches.
const (
	svcIP     = "10.96.0.20"
	dnsIP     = "10.96.0.10"
	inetAddr  = "198.51.100.10"
	inetNode  = "198.51.100.1"
	podMTU    = 1420
	clusterNS = "cluster.local"
)

// addNS creates a namespace of the lab that lab.sh down removes.
func (l *lab) addNS(name string) {
	l.t.Helper()
	if out, err := exec.Command("ip", "netns", "add", l.ns(name)).CombinedOutput(); err != nil {
		l.t.Fatalf("ip netns add %s: %v\n%s", l.ns(name), err, out)
	}
	f, err := openAppend(filepath.Join(l.dir, "namespaces"))
	if err != nil {
		l.t.Fatal(err)
	}
	fmt.Fprintln(f, l.ns(name))
	f.Close()
	l.mustExec(name, "ip", "link", "set", "lo", "up")
}

// cniPod creates pod namespace name on node as a container runtime does:
// the CNI reference plugins' bridge with host-local IPAM over subnet,
// invoked with the CNI_* environment and the config on stdin. It returns
// the pod's address.
func (l *lab) cniPod(node, name, subnet string) string {
	l.t.Helper()
	dir := os.Getenv("CNI_PLUGINS_DIR")
	if dir == "" {
		home, _ := os.UserHomeDir()
		dir = filepath.Join(home, ".cache", "bridgehead", "cni-plugins")
	}
	if _, err := os.Stat(filepath.Join(dir, "bridge")); err != nil {
		l.t.Fatalf("CNI plugins: %v (make cni-plugins)", err)
	}
	l.addNS(name)
	conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"pods","type":"bridge","bridge":"cni0","isGateway":true,"ipMasq":false,"mtu":%d,
"ipam":{"type":"host-local","ranges":[[{"subnet":%q}]],"routes":[{"dst":"0.0.0.0/0"}],"dataDir":%q}}`,
		podMTU, subnet, filepath.Join(l.dir, "ipam-"+node))
	c := exec.Command("ip", "netns", "exec", l.ns(node), filepath.Join(dir, "bridge"))
	c.Env = []string{"CNI_COMMAND=ADD", "CNI_CONTAINERID=" + name, "CNI_NETNS=/run/netns/" + l.ns(name),
		"CNI_IFNAME=eth0", "CNI_PATH=" + dir, "PATH=/usr/sbin:/usr/bin:/sbin:/bin"}
	c.Stdin = strings.NewReader(conf)
	out, err := c.Output()
	if err != nil {
		l.t.Fatalf("CNI ADD %s on %s: %v\n%s", name, node, err, out)
	}
	var res struct {
		IPs []struct{ Address string } `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil || len(res.IPs) == 0 {
		l.t.Fatalf("CNI ADD %s: result %s: %v", name, out, err)
	}
	return strings.Split(res.IPs[0].Address, "/")[0]
}

// serve runs a TCP server (bhprobe kubelet: HTTPS, many connections) in
// namespace ns on listen until the test ends.
func (l *lab) serve(p pki, ns, listen string) {
	l.t.Helper()
	c := exec.Command("ip", "netns", "exec", l.ns(ns), filepath.Join(l.bin, "bhprobe"), "kubelet",
		"-listen", listen, "-cert", p.path("kubelet.pem"), "-key", p.path("kubelet.key"))
	out := &syncbuf.Buffer{}
	c.Stdout, c.Stderr = out, out
	if err := c.Start(); err != nil {
		l.t.Fatal(err)
	}
	appendPID(l.t, l, c.Process.Pid)
	l.t.Cleanup(func() { c.Process.Kill(); c.Wait() })
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(out.String(), "listening"); {
		if time.Now().After(deadline) {
			l.t.Fatalf("server in %s did not start: %s", ns, out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// nft loads a ruleset into namespace ns.
func (l *lab) nft(ns, ruleset string) {
	l.t.Helper()
	c := exec.Command("ip", "netns", "exec", l.ns(ns), "nft", "-f", "-")
	c.Stdin = strings.NewReader(ruleset)
	if out, err := c.CombinedOutput(); err != nil {
		l.t.Fatalf("nft in %s: %v\n%s\n%s", ns, err, out, ruleset)
	}
}

// kubeProxy is what kube-proxy's nftables mode does on a node for the two
// Services: DNAT each ClusterIP to its endpoint, for pods (prerouting) and
// for the node itself (output), and masquerade the hairpin back onto the
// bridge so the reply returns through the node.
func kubeProxy(svcBackend, dnsBackend string) string {
	return fmt.Sprintf(`table ip kube-proxy {
	chain services {
		ip daddr %[1]s tcp dport 80 dnat to %[2]s:8080
		ip daddr %[3]s udp dport 53 dnat to %[4]s:53
		ip daddr %[3]s tcp dport 53 dnat to %[4]s:53
	}
	chain prerouting {
		type nat hook prerouting priority dstnat; policy accept;
		jump services
	}
	chain output {
		type nat hook output priority -100; policy accept;
		jump services
	}
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ct status dnat iifname "cni0" oifname "cni0" masquerade
	}
}
`, svcIP, svcBackend, dnsIP, dnsBackend)
}

// nodeEgress is the node agent's egress rule on node B: pods reach
// outside the cluster with the node's address; cluster CIDRs keep pod
// addresses.
const nodeEgress = `table ip node-egress {
	chain postrouting {
		type nat hook postrouting priority srcnat; policy accept;
		ip saddr 10.245.0.0/16 ip daddr != { 10.224.0.0/16, 10.244.0.0/16, 192.168.50.0/24, 10.245.0.0/16, 10.96.0.0/12 } masquerade
	}
}
`

// TestSeedChecks builds the two-site lab with pods made by the CNI
// plugins, a ClusterIP DNATed as kube-proxy does to a pod in the other
// site, the cluster DNS (dnsmasq) behind a ClusterIP, an "internet" host
// behind node B with the node's egress SNAT, and the relay in site A
// where the API server's egress lives. `bridgehead verify --on pod` from
// a pod of site B passes every check; then each is broken in turn
// (MTU lowered, SNAT rule removed, DNS stopped, gateway stopped) and the
// right check fails with the right reason.
func TestSeedChecks(t *testing.T) {
	requireRoot(t)
	if _, err := exec.LookPath("dnsmasq"); err != nil {
		t.Fatalf("dnsmasq: %v (make deps installs dnsmasq-base)", err)
	}
	p := newPKI(t, t.TempDir())
	l := startLab(t, "CONFIG_EXTRA_A="+relayYAML(p, false))
	l.startKubelet(p)

	podA := l.cniPod("a-node", "a-pod1", "10.244.1.0/24")
	podB := l.cniPod("b-node", "b-pod1", "10.245.1.0/24")
	dnsPod := l.cniPod("b-node", "b-pod2", "10.245.1.0/24")
	l.serve(p, "a-pod1", ":8080")

	// The cluster DNS: dnsmasq answering for the cluster domain only.
	var dns *exec.Cmd
	startDNS := func() {
		dns = exec.Command("ip", "netns", "exec", l.ns("b-pod2"), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
			"--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address="+dnsPod, "--user=root", "--pid-file=",
			"--local=/"+clusterNS+"/", "--host-record=kubernetes.default.svc."+clusterNS+",10.96.0.1")
		if err := dns.Start(); err != nil {
			t.Fatal(err)
		}
		appendPID(t, l, dns.Process.Pid)
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if out, _ := l.exec("b-pod2", "ss", "-Huln", "sport", "= :53"); strings.Contains(out, dnsPod+":53") {
				return
			}
			if time.Now().After(deadline) {
				t.Fatal("dnsmasq does not listen on port 53")
			}
		}
	}
	stopDNS := func() {
		dns.Process.Kill()
		dns.Wait()
	}
	startDNS()
	t.Cleanup(stopDNS)
	l.nft("b-node", kubeProxy(podA, dnsPod))

	// The internet: a host on node B's uplink that routes nothing back to
	// the pods; only SNAT gets its answers home.
	l.addNS("inet")
	l.mustExec("b-node", "ip", "link", "add", "up0", "type", "veth", "peer", "name", "eth0", "netns", l.ns("inet"))
	l.mustExec("b-node", "ip", "addr", "add", inetNode+"/24", "dev", "up0")
	l.mustExec("b-node", "ip", "link", "set", "up0", "up")
	l.mustExec("inet", "ip", "addr", "add", inetAddr+"/24", "dev", "eth0")
	l.mustExec("inet", "ip", "link", "set", "eth0", "up")
	l.serve(p, "inet", ":80")
	l.nft("b-node", nodeEgress)

	verify := func() (string, bool) {
		out, err := l.exec("b-pod1", filepath.Join(l.bin, "bridgehead"), "verify", "--on", "pod",
			"--config", filepath.Join(l.dir, "b.yaml"), "--timeout", "1s",
			"--pod", podA, "--pod", dnsPod, "--service", svcIP+":80", "--dns", dnsIP+":53",
			"--egress", inetAddr+":80", "--callback-relay", relayAddr, "--node-address", nodeB)
		return out, err == nil
	}
	// want checks a report: rows[i] is "RESULT check" and a piece of the
	// row or its "->" line.
	want := func(t *testing.T, out string, rows ...[2]string) {
		t.Helper()
		for _, r := range rows {
			f := strings.Fields(r[0])
			found := false
			for _, block := range strings.Split(out, "\n") {
				if strings.HasPrefix(block, f[0]) && verifyLine(block, f[1]) != "" && (r[1] == "" || strings.Contains(block, r[1])) {
					found = true
				}
			}
			// The reason is on the "->" line after the row.
			if !found && r[1] != "" {
				lines := strings.Split(out, "\n")
				for i, line := range lines {
					if strings.HasPrefix(line, f[0]) && verifyLine(line, f[1]) != "" && i+1 < len(lines) && strings.Contains(lines[i+1], r[1]) {
						found = true
					}
				}
			}
			if !found {
				t.Errorf("want %s with %q:\n%s", r[0], r[1], out)
			}
		}
	}
	// Wait for the path: the first packets set up the session.
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, err := l.exec("b-pod1", filepath.Join(l.bin, "bhprobe"), "ping", "-count", "1", podA); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s never reached pod %s", podB, podA)
		}
	}

	t.Run("healthy", func(t *testing.T) {
		l.t = t
		start := time.Now()
		out, ok := verify()
		t.Logf("verify --on pod from %s (%s):\n%s", podB, time.Since(start).Round(time.Millisecond), out)
		if !ok || !strings.Contains(out, "6 passed, 0 failed, 0 skipped") {
			t.Fatalf("verify on the healthy cluster (exit ok %v)", ok)
		}
		want(t, out, [2]string{"PASS pod", "site-a/" + podA + " via gateways"}, [2]string{"PASS pod", "site-b/" + dnsPod + " direct"},
			[2]string{"PASS service", ""}, [2]string{"PASS dns", "10.96.0.1"}, [2]string{"PASS egress", ""}, [2]string{"PASS callback", "CONNECT 200"})
	})

	// Pods whose MTU is above the tunnel's still work when path-MTU
	// discovery does: gateway B answers "too big" and the pod check says
	// so instead of failing.
	t.Run("pod MTU above the tunnel's", func(t *testing.T) {
		l.t = t
		peer := regexp.MustCompile(`eth0@if(\d+)`).FindStringSubmatch(l.mustExec("b-pod1", "ip", "-o", "link", "show", "eth0"))
		if peer == nil {
			t.Fatal("no veth peer of the pod's eth0")
		}
		host := regexp.MustCompile(`(?m)^` + peer[1] + `: ([^@:]+)`).FindStringSubmatch(l.mustExec("b-node", "ip", "-o", "link", "show"))
		if host == nil {
			t.Fatalf("no link %s on node B", peer[1])
		}
		setMTU := func(mtu string) {
			l.mustExec("b-node", "ip", "link", "set", host[1], "mtu", mtu)
			l.mustExec("b-pod1", "ip", "link", "set", "eth0", "mtu", mtu)
		}
		setMTU("1500")
		defer setMTU(strconv.Itoa(podMTU))
		out, ok := l.exec("b-pod1", filepath.Join(l.bin, "bridgehead"), "verify", "--on", "pod",
			"--config", filepath.Join(l.dir, "b.yaml"), "--timeout", "1s", "--pod", podA, "--dns", dnsIP+":53")
		t.Logf("verify from a pod with MTU 1500:\n%s", out)
		if err := ok; err != nil || !regexp.MustCompile(`PASS +pod .* path mtu 1420 < mtu 1500 \(too-big from [0-9.]+\)`).MatchString(out) {
			t.Errorf("want the pod check to pass with the path MTU the gateway reported (err %v)", err)
		}
	})

	t.Run("MTU lowered", func(t *testing.T) {
		l.t = t
		l.mustExec("b-gw", "ip", "link", "set", "wan", "mtu", "1400")
		defer l.mustExec("b-gw", "ip", "link", "set", "wan", "mtu", "1500")
		out, ok := verify()
		t.Logf("verify with gateway B's WAN MTU at 1400:\n%s", out)
		if ok {
			t.Fatal("verify passed")
		}
		want(t, out, [2]string{"FAIL pod", fmt.Sprintf("< mtu %d", podMTU)}, [2]string{"FAIL pod", "is more than the tunnel carries"},
			[2]string{"PASS pod", "direct"})
	})

	t.Run("SNAT rule removed", func(t *testing.T) {
		l.t = t
		l.mustExec("b-node", "nft", "delete", "table", "ip", "node-egress")
		defer l.nft("b-node", nodeEgress)
		out, ok := verify()
		t.Logf("verify without the node's SNAT rule:\n%s", out)
		if ok || !strings.Contains(out, "5 passed, 1 failed") {
			t.Fatal("want one failure")
		}
		want(t, out, [2]string{"FAIL egress", "SNAT by the node agent"})
	})

	t.Run("DNS stopped", func(t *testing.T) {
		l.t = t
		stopDNS()
		defer startDNS()
		out, ok := verify()
		t.Logf("verify with the cluster DNS stopped:\n%s", out)
		if ok || !strings.Contains(out, "5 passed, 1 failed") {
			t.Fatal("want one failure")
		}
		want(t, out, [2]string{"FAIL dns", "is CoreDNS running"})
	})

	t.Run("gateway stopped", func(t *testing.T) {
		l.t = t
		stopGateway(t, l.gatewayPID("b"))
		out, ok := verify()
		t.Logf("verify with gateway B stopped:\n%s", out)
		if ok {
			t.Fatal("verify passed")
		}
		want(t, out, [2]string{"FAIL pod", "through the gateways"}, [2]string{"PASS pod", "direct"},
			[2]string{"FAIL service", "pod site-a/" + podA + " via gateways failed above"},
			[2]string{"SKIP callback", "needs pod site-a/" + podA + " via gateways, which failed above"},
			[2]string{"PASS egress", ""}, [2]string{"PASS dns", ""})
	})
}

// TestSeedChecksNodeAgent runs `bridgehead verify --on pod` in the node
// lab (deploy/lab/node-lab.sh), where the real node agent made the pod
// network: a pod on node a1 reaches a pod in site B through the gateways
// and one on node a2 directly, and the internet through the agent's SNAT.
// A ClusterIP DNATs to the pod in site B, the cluster DNS (dnsmasq) runs
// in the pod on node a2. The agent leaves the pods at the bridge plugin's
// MTU (1500) above the tunnel's 1420, which gateway A's "too big" answers
// make work. With the
// agent stopped and its table deleted, egress fails naming the node
// agent's table; restarted, the agent puts it back and egress passes.
// The callback path: gateway A runs the relay (where the API server's
// egress would live); from a pod on node b1 the relay reaches b1's
// kubelet port through the gateways, and with gateway A stopped the
// callback fails naming the relay.
func TestSeedChecksNodeAgent(t *testing.T) {
	p := newPKI(t, t.TempDir())
	nl := startNodeLab(t, "CONFIG_EXTRA_A="+relayYAML(p, false))
	nl.startKubeletIn(p, "b-n1")
	a1, _ := nl.addPod("a-n1", "p1")
	a2, _ := nl.addPod("a-n2", "p1")
	b1, _ := nl.addPod("b-n1", "p1")
	nl.serve(p, "inet", ":80")
	nl.serve(p, "b-n1-p1", ":8080")
	// The cluster DNS on node a2, both ClusterIPs DNATed on node a1.
	dns := exec.Command("ip", "netns", "exec", nl.ns("a-n2-p1"), "dnsmasq", "--keep-in-foreground", "--conf-file=/dev/null",
		"--no-resolv", "--no-hosts", "--bind-interfaces", "--listen-address="+a2, "--user=root", "--pid-file=",
		"--local=/"+clusterNS+"/", "--host-record=kubernetes.default.svc."+clusterNS+",10.96.0.1")
	if err := dns.Start(); err != nil {
		t.Fatal(err)
	}
	appendPID(t, nl.lab, dns.Process.Pid)
	t.Cleanup(func() { dns.Process.Kill(); dns.Wait() })
	nl.nft("a-n1", kubeProxy(b1, a2))
	verify := func() (string, bool) {
		out, err := nl.exec("a-n1-p1", filepath.Join(nl.bin, "bridgehead"), "verify", "--on", "pod",
			"--config", filepath.Join(nl.dir, "a.yaml"), "--timeout", "1s",
			"--pod", b1, "--pod", a2, "--egress", "198.51.100.100:80", "--dns", dnsIP+":53", "--service", svcIP+":80")
		return out, err == nil
	}
	// The first packets set up the session.
	for deadline := time.Now().Add(15 * time.Second); ; {
		if _, err := nl.exec("a-n1-p1", filepath.Join(nl.bin, "bhprobe"), "ping", "-count", "1", b1); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("pod %s never reached pod %s", a1, b1)
		}
	}
	row := func(out, result, check, text string) bool {
		for _, line := range strings.Split(out, "\n") {
			if strings.HasPrefix(line, result) && verifyLine(line, check) != "" && strings.Contains(line, text) {
				return true
			}
		}
		return false
	}

	var out string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) { // dnsmasq starting
		out, _ = verify()
		if row(out, "PASS", "dns", "") || time.Now().After(deadline) {
			break
		}
	}
	t.Logf("verify --on pod from %s on node a1:\n%s", a1, out)
	if !row(out, "PASS", "pod", "site-b/"+b1+" via gateways") || !row(out, "PASS", "pod", "site-a/"+a2+" direct") ||
		!row(out, "PASS", "egress", "198.51.100.100:80") || !row(out, "PASS", "service", svcIP) || !row(out, "PASS", "dns", "10.96.0.1") {
		t.Errorf("want pods across sites and within the site, the Service, DNS and egress to pass")
	}
	if !regexp.MustCompile(`path mtu 1420 < mtu 1500 \(too-big from `).MatchString(out) {
		t.Errorf("want the pod across sites to pass on the path MTU gateway A reports")
	}

	// The same from node a1 itself: its own address toward the internet.
	nodeOut, _ := nl.exec("a-n1", filepath.Join(nl.bin, "bridgehead"), "verify", "--on", "node",
		"--config", filepath.Join(nl.dir, "a.yaml"), "--timeout", "1s",
		"--pod", b1, "--pod", a2, "--egress", "198.51.100.100:80", "--dns", dnsIP+":53", "--service", svcIP+":80")
	t.Logf("verify --on node on node a1:\n%s", nodeOut)
	if !row(nodeOut, "PASS", "pod", "site-b/"+b1+" via gateways") || !row(nodeOut, "PASS", "pod", "site-a/"+a2+" direct") ||
		!row(nodeOut, "PASS", "egress", "198.51.100.100:80") || !row(nodeOut, "PASS", "service", svcIP) || !row(nodeOut, "PASS", "dns", "10.96.0.1") {
		t.Errorf("want pods, the Service, DNS and egress to pass from the node")
	}

	nl.stopAgent("a-n1")
	nl.mustExec("a-n1", "nft", "delete", "table", "inet", "bridgehead-node")
	out, _ = verify()
	t.Logf("with node a1's agent stopped and its table deleted:\n%s", out)
	if !row(out, "FAIL", "egress", "198.51.100.100:80") || !strings.Contains(out, "nft list table inet bridgehead-node") {
		t.Errorf("want egress to fail naming the node agent's table")
	}

	nl.startAgent("a-n1")
	nl.waitAgentSynced("a-n1", 1)
	out, _ = verify()
	t.Logf("with node a1's agent restarted:\n%s", out)
	if !row(out, "PASS", "egress", "198.51.100.100:80") {
		t.Errorf("want egress to pass again once the agent put its table back")
	}

	// The callback: from a pod on node b1, through the relay of site A
	// (gateway A) back to b1's kubelet port, over the tunnel both ways.
	callback := func() string {
		out, _ := nl.exec("b-n1-p1", filepath.Join(nl.bin, "bridgehead"), "verify", "--on", "pod",
			"--config", filepath.Join(nl.dir, "b.yaml"), "--timeout", "1s",
			"--callback-relay", relayAddr, "--node-address", "192.168.50.11")
		return out
	}
	out = callback()
	t.Logf("verify --on pod from %s on node b1, callback only:\n%s", b1, out)
	if !row(out, "PASS", "callback", relayAddr+" -> 192.168.50.11:"+kubeletPort) {
		t.Errorf("want the callback through gateway A's relay to node b1's kubelet to pass")
	}
	// The cluster's matrix: `verify --on node --report` on node a1 and on
	// node b1 publish into a real kube-apiserver that lives in site A
	// (site B reaches it through the gateways), with verify's own
	// credential; `verify --collect` reads one site × check matrix. The
	// relay serves the other sites (it refuses its own site's nodes,
	// which the API server reaches directly): a1's callback SKIPs.
	env, kc := nl.labAPIServer("a-gw", gwA+":6443")
	report := func(n string, args ...string) {
		t.Helper()
		start := time.Now()
		out, err := nl.exec(n, append([]string{filepath.Join(nl.bin, "bridgehead"), "verify", "--on", "node",
			"--config", filepath.Join(nl.dir, n[:1]+".yaml"), "--timeout", "1s",
			"--report", "--kubeconfig", kc, "--node-name", nodeName(n)}, args...)...)
		t.Logf("verify --on node --report on %s (%v, %v):\n%s", n, time.Since(start).Round(time.Millisecond), err, out)
	}
	report("a-n1", "--pod", b1, "--pod", a2, "--egress", "198.51.100.100:80", "--dns", dnsIP+":53", "--service", svcIP+":80")
	report("b-n1", "--pod", a1, "--callback-relay", relayAddr, "--node-address", "192.168.50.11")
	m, js, ok := nl.collectMatrix(env, filepath.Join(nl.dir, "a.yaml"))
	t.Logf("verify --collect:\n%s", js)
	if !ok || len(m.Rows) != 2 || m.Missing != 0 || m.Failing != 0 || m.Stale != 0 {
		t.Errorf("want two fresh reports, nothing failing and no site missing (exit ok %v)", ok)
	}
	wantCells := map[string]map[string]bhverify.Result{
		"site-a/node-a1": {"pod": bhverify.Pass, "service": bhverify.Pass, "dns": bhverify.Pass, "egress": bhverify.Pass, "callback": bhverify.Skip},
		"site-b/node-b1": {"pod": bhverify.Pass, "callback": bhverify.Pass, "dns": bhverify.Skip, "egress": bhverify.Skip},
	}
	for _, r := range m.Rows {
		want, ok := wantCells[r.Site+"/"+r.Node]
		if !ok || r.On != "node" {
			t.Errorf("row %s/%s on %q: want site-a/node-a1 and site-b/node-b1, on node", r.Site, r.Node, r.On)
			continue
		}
		for check, res := range want {
			if r.Cells[check].Result != res {
				t.Errorf("%s/%s %s: %+v, want %s", r.Site, r.Node, check, r.Cells[check], res)
			}
		}
	}

	stopGateway(t, nl.gatewayPID("a"))
	out = callback()
	t.Logf("with gateway A (and its relay) stopped:\n%s", out)
	if !row(out, "FAIL", "callback", relayAddr) || !strings.Contains(out, "cannot connect to the relay") ||
		!strings.Contains(out, "is its gateway up") {
		t.Errorf("want the callback to fail naming the relay and its gateway")
	}
}
