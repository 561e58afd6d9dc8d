package e2e

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/internal/tcptest"
	"github.com/bridgehead/bridgehead/kube"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// followLab is the two-site lab with both gateways following the
// catalog published in a real API server (kubernetes.follow), reached
// from the gateway namespaces through a relay the test runs.
type followLab struct {
	*lab
	env   *kubetest.Env
	cs    kubernetes.Interface
	sites []config.Site // the published catalog
	gw    map[string]*exec.Cmd
}

// startFollowLab starts the lab, publishes its catalog, and restarts
// both gateways from configs that follow it (each writing its own
// catalog file, <site>-catalog.yaml).
func startFollowLab(t *testing.T) *followLab {
	return startFollowLabWith(t, func(fl *followLab) {
		cfg, err := config.Load(filepath.Join(fl.dir, "a.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		fl.sites = cfg.Sites
		fl.publish(fl.sites)
	})
}

// startFollowLabWith is startFollowLab with the catalog put in place by
// publish, before the gateways restart.
func startFollowLabWith(t *testing.T, publish func(*followLab)) *followLab {
	requireRoot(t)
	env := kubetest.Start(t)
	env.InstallCRDs(t, "../deploy/kubernetes/crds")
	// The namespaces and the gateways' shared read access as shipped.
	env.ApplyFiles(t, "../deploy/kubernetes/namespace.yaml", "../deploy/kubernetes/gateway-rbac.yaml")
	cs := env.Clientset(t)
	fl := &followLab{lab: startLab(t), env: env, cs: cs, gw: map[string]*exec.Cmd{}}
	publish(fl)

	apiAddr := strings.TrimPrefix(env.Config.Host, "https://")
	for _, s := range []string{"a", "b"} {
		relayInto(t, fl.ns(s+"-gw"), apiAddr)
		fl.stopGateway(s, fl.gatewayPID(s))
		head, _, ok := strings.Cut(fl.readConfig(s), "sites:\n")
		if !ok {
			t.Fatal("lab config without sites")
		}
		kc := fl.gatewayKubeconfig("site-" + s + ".gw-" + s + "1")
		fl.writeConfig(s, head+fmt.Sprintf("kubernetes: {kubeconfig: %s, follow: true, catalogFile: %s-catalog.yaml}\n", kc, s))
		fl.startGateway(s)
	}
	return fl
}

// gatewayKubeconfig admits gateway name as an operator does (its
// ServiceAccount and its own status-only ClusterRole, as `bridgehead
// catalog to-resources --gateway-rbac` writes them) and writes a
// kubeconfig with a bound token of that ServiceAccount (TokenRequest, as
// a pod's projected token): the gateway follows and registers with
// nothing but the shipped least-privilege RBAC, never as the admin.
func (fl *followLab) gatewayKubeconfig(name string) string {
	t := fl.t
	t.Helper()
	var b bytes.Buffer
	if err := kube.WriteObjects(&b, kube.GatewayRBAC(name)); err != nil {
		t.Fatal(err)
	}
	rbac := filepath.Join(fl.dir, name+"-rbac.yaml")
	if err := os.WriteFile(rbac, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fl.env.ApplyFiles(t, rbac)
	path := filepath.Join(fl.dir, name+".kubeconfig")
	if err := kubetest.WriteKubeconfig(fl.env.ServiceAccountConfig(t, kube.GatewayNamespace, name), path); err != nil {
		t.Fatal(err)
	}
	return path
}

// publish writes sites as the controller does (package kube/catalog):
// the slices, then the base, then stale slices deleted.
func (fl *followLab) publish(sites []config.Site) {
	t := fl.t
	t.Helper()
	ns := config.DefaultCatalogNamespace
	cms, err := catalog.Render(sites, catalog.Namespace(ns))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	keep := map[string]bool{}
	for _, cm := range append(cms[1:], cms[0]) {
		keep[cm.Name] = true
		_, err := fl.cs.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		if apierrors.IsNotFound(err) {
			_, err = fl.cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	list, err := fl.cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{LabelSelector: catalog.CatalogLabel + "=" + catalog.KindNodes})
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range list.Items {
		if !keep[cm.Name] {
			if err := fl.cs.CoreV1().ConfigMaps(ns).Delete(ctx, cm.Name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// startGateway runs `bridgehead run` in a gateway namespace (lab.sh
// down stops it with the rest) and waits for its tunnel routes.
func (fl *followLab) startGateway(site string) {
	t := fl.t
	t.Helper()
	logf, err := openAppend(filepath.Join(fl.dir, site+".log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	c := exec.Command("ip", "netns", "exec", fl.ns(site+"-gw"), filepath.Join(fl.bin, "bridgehead"), "run", "--config", filepath.Join(fl.dir, site+".yaml"))
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	appendPID(t, fl.lab, c.Process.Pid)
	fl.gw[site] = c
	done := make(chan error, 1)
	go func() { done <- c.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if out, _ := fl.exec(site+"-gw", "ip", "route", "show", "dev", "bh0"); strings.TrimSpace(out) != "" {
			return
		}
		select {
		case err := <-done:
			b, _ := os.ReadFile(filepath.Join(fl.dir, site+".log"))
			t.Fatalf("gateway %s exited: %v\n%s", site, err, b)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway %s not up within 30 s", site)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stopGateway stops a gateway process and waits until it is gone.
func (fl *followLab) stopGateway(site string, pid int) {
	t := fl.t
	t.Helper()
	if c := fl.gw[site]; c != nil && c.Process.Pid == pid {
		delete(fl.gw, site)
	}
	if err := syscall.Kill(pid, syscall.SIGTERM); err != nil {
		t.Fatalf("stop gateway %s: %v", site, err)
	}
	for i := 0; syscall.Kill(pid, 0) == nil; i++ {
		if i == 200 {
			t.Fatalf("gateway %s (pid %d) still running 10 s after SIGTERM", site, pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// relayInto makes addr (the API server, on the host's loopback) reachable
// at the same address inside namespace ns: a listener opened in ns, each
// connection relayed to addr from the host. Closed when the test ends.
func relayInto(t *testing.T, ns, addr string) {
	t.Helper()
	ln, err := listenIn(ns, addr)
	if err != nil {
		t.Fatal(err)
	}
	tcptest.Forward(t, ln, addr)
}

// listenIn opens a TCP listener inside network namespace ns.
func listenIn(ns, addr string) (ln net.Listener, err error) {
	err = inNetns(ns, func() error {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln, err
}

// inNetns runs fn on a thread inside network namespace ns: sockets it
// opens stay in ns.
func inNetns(ns string, fn func() error) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	if err != nil {
		return err
	}
	defer orig.Close()
	target, err := netns.GetFromName(ns)
	if err != nil {
		return err
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		return err
	}
	ferr := fn()
	if err := netns.Set(orig); err != nil {
		panic(fmt.Sprintf("cannot return to the original network namespace: %v", err)) // the thread would be unusable
	}
	return ferr
}

// joinNode is the i-th node joining site B in the tests: address
// 192.168.50.(20+i) and pod block 10.245.(10+i).0/24, both put on site
// B's node namespace so the new pod range answers there.
func (fl *followLab) joinNode(i int) (config.Node, string) {
	n := config.Node{Name: fmt.Sprintf("node-b-join%02d", i),
		Address: netip.AddrFrom4([4]byte{192, 168, 50, byte(20 + i)}),
		PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 245, byte(10 + i), 0}), 24)}
	pod := fmt.Sprintf("10.245.%d.10", 10+i)
	fl.mustExec("b-node", "ip", "addr", "add", n.Address.String()+"/24", "dev", "eth0")
	fl.mustExec("b-node", "ip", "addr", "add", pod+"/32", "dev", "lo")
	return n, pod
}

// withNode is the catalog with node n added to (add) or removed from
// site name.
func withNode(sites []config.Site, name string, n config.Node, add bool) []config.Site {
	out := slices.Clone(sites)
	for i := range out {
		if out[i].Name != name {
			continue
		}
		nodes := slices.DeleteFunc(slices.Clone(out[i].Nodes), func(x config.Node) bool { return x.Name == n.Name })
		if add {
			nodes = append(nodes, n)
		}
		out[i].Nodes = nodes
	}
	return out
}

// pingOnce reports whether one echo from site A's pod to dst is answered
// within timeout.
func (fl *followLab) pingOnce(dst string, timeout time.Duration) bool {
	_, err := fl.exec("a-node", filepath.Join(fl.bin, "bhprobe"), "ping", "-src", podA, "-count", "1", "-timeout", timeout.String(), dst)
	return err == nil
}

// waitPing pings dst from site A's pod every 20 ms until it answers and
// returns when it did (an ICMP socket the test opens in the node's
// namespace, so the figure is not a process start).
func (fl *followLab) waitPing(dst string, within time.Duration) time.Time {
	fl.t.Helper()
	var c *icmp.PacketConn
	if err := inNetns(fl.ns("a-node"), func() (err error) {
		c, err = icmp.ListenPacket("ip4:icmp", podA)
		return err
	}); err != nil {
		fl.t.Fatal(err)
	}
	defer c.Close()
	to := &net.IPAddr{IP: net.ParseIP(dst)}
	id := os.Getpid() & 0xffff
	buf := make([]byte, 1500)
	deadline := time.Now().Add(within)
	for seq := 1; time.Now().Before(deadline); seq++ {
		msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: id, Seq: seq, Data: []byte("bridgehead follow")}}
		b, err := msg.Marshal(nil)
		if err != nil {
			fl.t.Fatal(err)
		}
		if _, err := c.WriteTo(b, to); err != nil {
			fl.t.Fatal(err)
		}
		wait := time.Now().Add(20 * time.Millisecond)
		for {
			c.SetReadDeadline(wait)
			n, from, err := c.ReadFrom(buf)
			if err != nil {
				break // this echo's 20 ms are over
			}
			m, err := icmp.ParseMessage(1, buf[:n])
			if err != nil || m.Type != ipv4.ICMPTypeEchoReply || from.String() != dst {
				continue
			}
			if e, ok := m.Body.(*icmp.Echo); ok && e.ID == id {
				return time.Now()
			}
		}
	}
	fl.t.Fatalf("%s not answering from site A within %v", dst, within)
	return time.Time{}
}

func percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(float64(len(s)-1)*p + 0.5)
	return s[i]
}

// TestFollowJoin: a node joining site B in the published catalog makes
// its pod range reachable from site A's pod (site B's gateway follows the
// catalog and routes the new block to the node; site A's routes site B's
// aggregate), measured from the first ConfigMap write to the first
// answered ping over 20 joins; removing the node withdraws its route.
func TestFollowJoin(t *testing.T) {
	fl := startFollowLab(t)
	fl.waitPing(podB, 20*time.Second)

	const joins = 20
	var took []time.Duration
	for i := range joins {
		n, pod := fl.joinNode(i)
		if fl.pingOnce(pod, 300*time.Millisecond) {
			t.Fatalf("join %d: %s answered before the node was published", i, pod)
		}
		fl.sites = withNode(fl.sites, "site-b", n, true)
		start := time.Now()
		fl.publish(fl.sites)
		published := time.Since(start)
		took = append(took, fl.waitPing(pod, 10*time.Second).Sub(start))
		t.Logf("join %d: published in %v, answered after %v", i, published.Round(time.Millisecond), took[i].Round(time.Millisecond))
	}
	if b, err := os.ReadFile(filepath.Join(fl.dir, "b.log")); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.Contains(line, "catalog file written") || strings.Contains(line, "config reloaded") {
				t.Log(line)
			}
		}
	}
	t.Logf("join to ping (ConfigMap write to first answer, an echo every 20 ms) over %d joins: p50 %v, p99 %v, max %v",
		joins, percentile(took, 0.5).Round(time.Millisecond), percentile(took, 0.99).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond))
	if p99 := percentile(took, 0.99); p99 > 2*time.Second {
		t.Errorf("p99 join to ping %v, over 2 s", p99)
	}

	// Remove the first joined node: its route goes, its range stops answering.
	first, pod := fl.sites[1].Nodes[1], "10.245.10.10"
	if first.Name != "node-b-join00" {
		t.Fatalf("unexpected node order: %s", first.Name)
	}
	fl.sites = withNode(fl.sites, "site-b", first, false)
	start := time.Now()
	fl.publish(fl.sites)
	for {
		out := fl.mustExec("b-gw", "ip", "route", "show", "10.245.10.0/24")
		if strings.TrimSpace(out) == "" {
			break
		}
		if time.Since(start) > 10*time.Second {
			t.Fatalf("route of the removed node still there after 10 s: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("removed node's route withdrawn %v after the write", time.Since(start).Round(time.Millisecond))
	if fl.pingOnce(pod, 500*time.Millisecond) {
		t.Errorf("%s still answers after its node left the catalog", pod)
	}
	fl.pingOnce("10.245.11.10", time.Second) // the others stay
}

// TestFollowAPIServerGone: the API server stops while a ping runs
// through the gateways: no loss. Gateway A restarted with the API server
// still down comes up from its catalog file and forwards. The API server
// back, both gateways resync without a restart: a node joining each site
// meanwhile is routed.
func TestFollowAPIServerGone(t *testing.T) {
	fl := startFollowLab(t)
	n, pod := fl.joinNode(0)
	fl.sites = withNode(fl.sites, "site-b", n, true)
	fl.publish(fl.sites)
	fl.waitPing(pod, 10*time.Second)

	// A steady ping (5 a second) across the stop.
	type result struct {
		out string
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := fl.exec("a-node", filepath.Join(fl.bin, "bhprobe"), "ping", "-src", podA, "-count", "75", "-timeout", "1s", podB)
		done <- result{out, err}
	}()
	time.Sleep(time.Second)
	stopped := time.Now()
	if err := fl.env.StopAPIServer(); err != nil {
		t.Logf("%v (gone either way)", err)
	}
	t.Logf("API server stopped in %v", time.Since(stopped).Round(time.Millisecond))
	r := <-done
	lines := strings.Split(strings.TrimSpace(r.out), "\n")
	t.Logf("ping across the API server stop: %s", lines[len(lines)-1])
	if r.err != nil {
		t.Fatalf("ping lost packets while the API server stopped: %v\n%s", r.err, r.out)
	}

	// Gateway A restarted while the API server is down.
	fl.stopGateway("a", fl.gw["a"].Process.Pid)
	restart := time.Now()
	fl.startGateway("a")
	fl.waitPing(podB, 10*time.Second)
	fl.waitPing(pod, 10*time.Second)
	t.Logf("gateway A restarted with the API server down: forwarding %v after the start", time.Since(restart).Round(time.Millisecond))
	if b, _ := os.ReadFile(filepath.Join(fl.dir, "a.log")); !strings.Contains(string(b), "following the catalog") {
		t.Errorf("gateway A's log does not show it following its catalog file")
	}

	// The API server back: joins in both sites reach both gateways
	// without a restart.
	pidA, pidB := fl.gw["a"].Process.Pid, fl.gw["b"].Process.Pid
	if err := fl.env.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	back := time.Now()
	n1, pod1 := fl.joinNode(1)
	fl.sites = withNode(fl.sites, "site-b", n1, true)
	nodeA := config.Node{Name: "node-a2", Address: netip.MustParseAddr("10.224.0.6"), PodCIDR: netip.MustParsePrefix("10.244.2.0/24")}
	fl.sites = withNode(fl.sites, "site-a", nodeA, true)
	fl.publish(fl.sites)
	fl.waitPing(pod1, 60*time.Second)
	for {
		if out, _ := fl.exec("a-gw", "ip", "route", "show", "10.244.2.0/24"); strings.Contains(out, "via 10.224.0.6") {
			break
		}
		if time.Since(back) > 60*time.Second {
			t.Fatal("gateway A did not route site A's new node within 60 s of the API server's return")
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Logf("after the API server's return: both gateways routed the new nodes %v after it was ready", time.Since(back).Round(time.Millisecond))
	if fl.gw["a"].Process.Pid != pidA || fl.gw["b"].Process.Pid != pidB || syscall.Kill(pidA, 0) != nil || syscall.Kill(pidB, 0) != nil {
		t.Error("a gateway restarted to resync")
	}

	// Gateway B ran through it all: it is connected again, its last
	// sync is after the return, and its log has at most one line for a
	// loss and one for the return. (Through the test's relay an outage
	// is a connection closed at once, which client-go's REST client
	// retries for a while before the informer sees an error, so a short
	// one may count nothing; kube/follow's TestFollowAPIServerGone
	// checks the counts against a refusing API server. Seen here after
	// the restart: 403s while the new API server's RBAC cache fills.)
	// A watch refused with 403 while the new API server's RBAC cache
	// fills backs off before it connects again: wait for it (up to
	// 20 s), then read the counts.
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		m := fl.metrics("b")
		if metric(m, "bridgehead_follow_connected") == 1 && metric(m, "bridgehead_follow_last_sync_timestamp_seconds") >= float64(back.Unix()) {
			break
		}
	}
	m := fl.metrics("b")
	var errs float64
	for _, line := range strings.Split(m, "\n") {
		if strings.HasPrefix(line, "bridgehead_follow_watch_errors_total{") {
			if v := metric(line, line[:strings.LastIndexByte(line, ' ')]); v > 0 {
				errs += v
				t.Logf("gateway B: %s", line)
			}
		}
	}
	if metric(m, "bridgehead_follow_connected") != 1 || metric(m, "bridgehead_follow_last_sync_timestamp_seconds") < float64(back.Unix()) {
		t.Errorf("gateway B: %v watch errors, connected %v, last sync %v (API server back at %d)", errs,
			metric(m, "bridgehead_follow_connected"), metric(m, "bridgehead_follow_last_sync_timestamp_seconds"), back.Unix())
	}
	b, _ := os.ReadFile(filepath.Join(fl.dir, "b.log"))
	if down, up := strings.Count(string(b), "catalog watch cannot reach the API server"), strings.Count(string(b), "catalog watch reaches the API server again"); down != up || down > 1 {
		t.Errorf("gateway B's log: %d lines for the loss and %d for the return over %v errors, want at most one each", down, up, errs)
	}
}
