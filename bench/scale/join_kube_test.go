package scale

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/bench/internal/procfs"
	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube/catalog"
	"github.com/bridgehead/bridgehead/nodeagent"
	"github.com/bridgehead/bridgehead/nodeagent/kubenode"
)

// joinChildEnv set makes TestAgentJoinChild run the agent; the parent
// (TestAgentJoinCost) sets it on the test binary it starts again.
const joinChildEnv = "BRIDGEHEAD_JOIN_CHILD"

const joinNS = "bridgehead-system"

// TestAgentJoinCost measures what joins cost one node agent at the
// cluster's size (issue 34): BRIDGEHEAD_JOIN_SCALE nodes (10000 for the
// issue) over one site per 50 nodes, dual-stack, two gateways a site,
// published as kube/catalog ConfigMaps in a real kube-apiserver, as the
// controller writes them (changed objects only, the base last). The agent
// is the node agent's Kubernetes source (kubenode.Source: its Node
// informer, the catalog follower and Load building the model) in its own
// process (the test binary again, TestAgentJoinChild), so its CPU time
// (utime+stime) and RSS are its own; it counts the bytes its API
// connections receive.
//
// Three windows of BRIDGEHEAD_JOIN_COUNT (default 30) seconds: idle, one
// join a second in other sites than the agent's, one join a second in
// the agent's site. A window's CPU and bytes per join are its figures
// less the idle window's. It is a benchmark: it asserts that the agent
// sees every join of its site, not speed.
func TestAgentJoinCost(t *testing.T) {
	if os.Getenv(joinChildEnv) != "" {
		t.Skip("the child")
	}
	nodes, _ := strconv.Atoi(os.Getenv("BRIDGEHEAD_JOIN_SCALE"))
	if nodes <= 0 {
		t.Skip("set BRIDGEHEAD_JOIN_SCALE=10000 to measure")
	}
	joins := 30
	if n, _ := strconv.Atoi(os.Getenv("BRIDGEHEAD_JOIN_COUNT")); n > 0 {
		joins = n
	}
	if nodes/max(nodes/50, 2)+joins > 128 {
		t.Fatalf("%d joins in a site of %d nodes: over the site's 128 pod blocks", joins, nodes/max(nodes/50, 2))
	}
	env := kubetest.Start(t)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: joinNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sites := joinSites(max(nodes/50, 2), nodes)
	pub := &publisher{cs: cs, current: map[string]*corev1.ConfigMap{}}
	t0 := time.Now()
	objs, bytes, err := pub.publish(ctx, sites)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("published %d sites, %d nodes: %d ConfigMaps, %d bytes, in %s", len(sites), nodes, objs, bytes, time.Since(t0).Round(time.Millisecond))

	self := sites[0].Nodes[0].Name
	if _, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: self,
		Labels: map[string]string{kubenode.SiteLabel: sites[0].Name}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	agent := startAgent(t, env.Kubeconfig, self)
	if err := agent.waitRoutes(func(n int) bool { return n > 0 }, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // informers settle
	t.Logf("agent up: %d routes, RSS %.1f MiB", agent.routes.Load(), procRSS(agent.pid()))

	type window struct {
		name       string
		cpu, bytes float64
		secs       float64
	}
	measure := func(name string, join func(k int)) window {
		fs, err := procfs.New(procfs.DefaultMount)
		if err != nil {
			t.Fatal(err)
		}
		cpu0, err := fs.ProcessCPU(agent.pid())
		if err != nil {
			t.Fatal(err)
		}
		b0, start := agent.bytes.Load(), time.Now()
		for k := range joins {
			next := start.Add(time.Duration(k+1) * time.Second)
			if join != nil {
				join(k)
			}
			time.Sleep(time.Until(next))
		}
		time.Sleep(2 * time.Second) // the last join's events
		cpu1, err := fs.ProcessCPU(agent.pid())
		if err != nil {
			t.Fatal(err)
		}
		return window{name: name, cpu: cpu1 - cpu0, bytes: float64(agent.bytes.Load() - b0), secs: time.Since(start).Seconds()}
	}
	joinIn := func(i, k int) {
		s := &sites[i]
		s.Nodes = append(s.Nodes, joinNode(i, len(s.Nodes)))
		if _, _, err := pub.publish(ctx, sites); err != nil {
			t.Fatal(err)
		}
	}
	idle := measure("idle", nil)
	other := measure("joins in other sites", func(k int) { joinIn(1+k*37%(len(sites)-1), k) })
	routes := agent.routes.Load()
	own := measure("joins in the agent's site", func(k int) { joinIn(0, k) })
	// Dual-stack: a route per family per node of the site.
	if err := agent.waitRoutes(func(n int) bool { return n == int(routes)+2*joins }, 30*time.Second); err != nil {
		t.Errorf("joins in the agent's site: %v", err)
	}
	t.Logf("agent RSS after the joins: %.1f MiB (peak %.1f MiB)", procRSS(agent.pid()), procHWM(agent.pid()))
	rate := idle.cpu / idle.secs
	brate := idle.bytes / idle.secs
	t.Logf("idle: %.3f s CPU, %.0f bytes received in %.1f s", idle.cpu, idle.bytes, idle.secs)
	per := map[string][2]float64{}
	for _, w := range []window{other, own} {
		cpu := (w.cpu - rate*w.secs) / float64(joins)
		b := (w.bytes - brate*w.secs) / float64(joins)
		per[w.name] = [2]float64{cpu, b}
		t.Logf("%s: %d joins in %.1f s: %.3f s CPU, %.0f bytes received; per join, less idle: %.2f ms CPU, %.0f bytes",
			w.name, joins, w.secs, w.cpu, w.bytes, 1000*cpu, b)
	}
	// A join lands in the agent's site once in len(sites) joins.
	n := float64(len(sites))
	o, s := per[other.name], per[own.name]
	avgCPU, avgB := ((n-1)*o[0]+s[0])/n, ((n-1)*o[1]+s[1])/n
	t.Logf("a join anywhere (1 in %d in the agent's site): %.3f ms CPU and %.0f bytes a node agent; x %d agents: %.2f s CPU, %.1f MB to the agents",
		len(sites), 1000*avgCPU, avgB, nodes, avgCPU*float64(nodes), avgB*float64(nodes)/1e6)
}

// TestAgentJoinChild is the agent of TestAgentJoinCost, run in its own
// process: it loads the model on every change, as nodeagent.Run does,
// and prints its route count and the bytes its API connections received
// when they change (looked at ten times a second).
func TestAgentJoinChild(t *testing.T) {
	if os.Getenv(joinChildEnv) == "" {
		t.Skip("run by TestAgentJoinCost")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("BRIDGEHEAD_JOIN_KUBECONFIG"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 50, 100
	var received atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &received} })
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s, err := kubenode.New(ctx, kubenode.Options{Client: client, Node: os.Getenv("BRIDGEHEAD_JOIN_NODE"), Namespace: joinNS,
		Catalog: filepath.Join(os.Getenv("BRIDGEHEAD_JOIN_DIR"), "catalog.yaml"), Recorder: record.NewFakeRecorder(1000),
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	if err != nil {
		t.Fatal(err)
	}
	var routes atomic.Int64
	lastErr := "<nil>"
	go func() {
		var r, b int64 = -1, -1
		for {
			if r1, b1 := routes.Load(), received.Load(); r1 != r || b1 != b {
				r, b = r1, b1
				fmt.Printf("agent routes=%d bytes=%d\n", r, b)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}()
	// As nodeagent.Run: load on every change; until the first model,
	// retry on a timer too.
	loaded := false
	for {
		var retry <-chan time.Time
		if !loaded {
			retry = time.After(time.Second)
		}
		select {
		case <-s.Changed():
		case <-retry:
		}
		d, err := s.Load()
		if err == nil {
			loaded = true
			routes.Store(int64(len(d.Routes)))
		}
		if msg := fmt.Sprint(err); msg != lastErr {
			fmt.Fprintln(os.Stderr, "agent: load:", msg)
			lastErr = msg
		}
	}
}

// countingTransport counts the response bytes read through it.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (c countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := c.rt.RoundTrip(r)
	if resp != nil && resp.Body != nil {
		resp.Body = countingBody{resp.Body, c.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

// agentProc is the child agent as the parent sees it.
type agentProc struct {
	cmd           *exec.Cmd
	routes, bytes atomic.Int64
}

func (a *agentProc) pid() int { return a.cmd.Process.Pid }

func startAgent(t *testing.T, kubeconfig, node string) *agentProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestAgentJoinChild$", "-test.timeout=0")
	cmd.Env = append(os.Environ(), joinChildEnv+"=1", "BRIDGEHEAD_JOIN_KUBECONFIG="+kubeconfig,
		"BRIDGEHEAD_JOIN_NODE="+node, "BRIDGEHEAD_JOIN_DIR="+t.TempDir())
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &agentProc{cmd: cmd}
	var wg sync.WaitGroup
	wg.Go(func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			var r, b int64
			if _, err := fmt.Sscanf(sc.Text(), "agent routes=%d bytes=%d", &r, &b); err == nil {
				a.routes.Store(r)
				a.bytes.Store(b)
			} else {
				fmt.Fprintln(os.Stderr, "agent:", sc.Text())
			}
		}
	})
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		wg.Wait()
	})
	return a
}

// waitRoutes waits until the agent's route count satisfies ok.
func (a *agentProc) waitRoutes(ok func(int) bool, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !ok(int(a.routes.Load())) {
		if time.Now().After(deadline) {
			return fmt.Errorf("agent has %d routes after %s", a.routes.Load(), timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// publisher writes publications as the controller does: the objects
// whose data changed since its last, every object but the base in
// Render's order (a site's slices before its index), then the base, then
// deletes the objects no longer rendered.
type publisher struct {
	cs      kubernetes.Interface
	current map[string]*corev1.ConfigMap
}

func (p *publisher) publish(ctx context.Context, sites []config.Site) (written, bytes int, err error) {
	objs, err := catalog.Render(sites, catalog.Namespace(joinNS))
	if err != nil {
		return 0, 0, err
	}
	cms := p.cs.CoreV1().ConfigMaps(joinNS)
	want := map[string]bool{}
	for _, o := range append(objs[1:], objs[0]) {
		want[o.Name] = true
		cur := p.current[o.Name]
		if cur != nil && maps.Equal(cur.Data, o.Data) {
			continue
		}
		var got *corev1.ConfigMap
		if cur == nil {
			got, err = cms.Create(ctx, o, metav1.CreateOptions{})
		} else {
			up := cur.DeepCopy()
			up.Labels, up.Data = o.Labels, o.Data
			got, err = cms.Update(ctx, up, metav1.UpdateOptions{})
		}
		if err != nil {
			return written, bytes, err
		}
		p.current[o.Name] = got
		written++
		bytes += catalog.Size(o)
	}
	for name := range p.current {
		if !want[name] {
			if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return written, bytes, err
			}
			delete(p.current, name)
		}
	}
	return written, bytes, nil
}

// joinSites is nSites dual-stack sites with two gateways each and nNodes
// nodes spread over them: site i has node CIDRs 10.<i/16>.<i%16*16>.0/20
// and fd00:<i>::/64, pod CIDRs 10.<64+i/2>.<i%2*128>.0/17 (128 blocks
// of /24) and fd10:<i>::/64 (blocks of /80).
func joinSites(nSites, nNodes int) []config.Site {
	sites := make([]config.Site, nSites)
	for i := range sites {
		name := fmt.Sprintf("site-%03d", i)
		sites[i] = config.Site{
			Name:      name,
			NodeCIDRs: []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/20", i/16, i%16*16)), netip.MustParsePrefix(fmt.Sprintf("fd00:%x::/64", i))},
			PodCIDRs:  []netip.Prefix{netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/17", 64+i/2, i%2*128)), netip.MustParsePrefix(fmt.Sprintf("fd10:%x::/64", i))},
			Keepalive: 25 * time.Second,
		}
		for j := 1; j <= 2; j++ {
			key := sha256.Sum256([]byte(name + strconv.Itoa(j)))
			sites[i].Gateways = append(sites[i].Gateways, config.Gateway{Name: fmt.Sprintf("gw%d", j),
				Address:   netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", i/16, i%16*16, j)),
				Address6:  netip.MustParseAddr(fmt.Sprintf("fd00:%x::%x", i, j)),
				Endpoint:  fmt.Sprintf("198.18.%d.%d:51820", i/250, i%250+j),
				PublicKey: base64.StdEncoding.EncodeToString(key[:])})
		}
	}
	for k := range nNodes {
		i := k % nSites
		sites[i].Nodes = append(sites[i].Nodes, joinNode(i, len(sites[i].Nodes)))
	}
	return sites
}

// joinNode is node idx (< 128) of site i: its address the idx-th of the
// site's node CIDRs after the gateways, its blocks the idx-th of its pod
// CIDRs.
func joinNode(i, idx int) config.Node {
	return config.Node{
		Name:     fmt.Sprintf("node-%03d-%04d", i, idx),
		Address:  netip.MustParseAddr(fmt.Sprintf("10.%d.%d.%d", i/16, i%16*16+1+idx/250, idx%250+1)),
		PodCIDR:  netip.MustParsePrefix(fmt.Sprintf("10.%d.%d.0/24", 64+i/2, i%2*128+idx)),
		Address6: netip.MustParseAddr(fmt.Sprintf("fd00:%x::%x", i, idx+10)),
		PodCIDR6: netip.MustParsePrefix(fmt.Sprintf("fd10:%x:0:0:%x::/80", i, idx)),
	}
}

// procHWM is the peak resident memory of process pid in MiB, 0 when
// unknown.
func procHWM(pid int) float64 {
	fs, err := procfs.New(procfs.DefaultMount)
	if err != nil {
		return 0
	}
	_, hwm, err := fs.ProcessMemory(pid)
	if err != nil {
		return 0
	}
	return float64(hwm) / 1024
}

// TestJoinSitesCheck: the generated catalog passes the checks the agent
// runs and gives a node its model (else the benchmark would measure
// refusals).
func TestJoinSitesCheck(t *testing.T) {
	sites := joinSites(4, 200)
	for len(sites[1].Nodes) < 128 { // as many joins as a site takes
		sites[1].Nodes = append(sites[1].Nodes, joinNode(1, len(sites[1].Nodes)))
	}
	c := &config.Config{Sites: sites}
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); len(problems) > 0 {
		t.Fatal(problems)
	}
	d, err := nodeagent.FromConfig(c, sites[1].Nodes[3].Name)
	if err != nil {
		t.Fatal(err)
	}
	// Its site's other nodes, both families, and the other sites'
	// node and pod CIDRs, both families.
	if want := 2*(len(sites[1].Nodes)-1) + 4*(len(sites)-1); len(d.Routes) != want {
		t.Fatalf("%d routes, want %d", len(d.Routes), want)
	}
	if strings.Count(sites[0].Nodes[0].Name, "-") != 2 {
		t.Fatal(sites[0].Nodes[0].Name)
	}
}
