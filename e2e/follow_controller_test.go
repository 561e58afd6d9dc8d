package e2e

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/controller"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// runController creates the lab catalog's Sites, Gateways and Nodes
// (mod may change them first, and runs after they exist), runs the real
// controller in this process (one replica) and waits for its first
// catalog with both sites.
func runController(t *testing.T, fl *followLab, mod func(dynamic.Interface, *kube.Resources) func()) {
	dyn, err := dynamic.NewForConfig(fl.env.Config)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(filepath.Join(fl.dir, "a.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	r, err := kube.FromConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var after func()
	if mod != nil {
		after = mod(dyn, r)
	}
	applyResources(t, dyn, fl, r)
	if after != nil {
		after()
	}
	c, err := controller.New(controller.Options{
		Client: fl.cs, Dynamic: dyn, Registry: prometheus.NewRegistry(),
		Logger:    slog.New(slog.NewTextHandler(&tWriter{t: t}, &slog.HandlerOptions{Level: slog.LevelWarn})),
		Namespace: config.DefaultCatalogNamespace, ReleaseGrace: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Logf("controller: %v", err)
		}
	})
	// The controller's first catalog, with both sites' nodes.
	deadline := time.Now().Add(30 * time.Second)
	for {
		cm, err := fl.cs.CoreV1().ConfigMaps(config.DefaultCatalogNamespace).Get(ctx, catalog.BaseName, metav1.GetOptions{})
		if err == nil && strings.Contains(cm.Data[catalog.SitesKey], "site-b") && strings.Contains(cm.Data[catalog.SitesKey], "site-a") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no catalog from the controller within 30 s: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// applyResources creates the lab catalog's Sites, Gateways and Nodes.
func applyResources(t *testing.T, dyn dynamic.Interface, fl *followLab, r *kube.Resources) {
	t.Helper()
	ctx := context.Background()
	for _, o := range r.Objects(false, false) {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		gvr := controller.SitesGVR
		if u.GetKind() == "Gateway" {
			gvr = controller.GatewaysGVR
		}
		if _, err := dyn.Resource(gvr).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s %s: %v", u.GetKind(), u.GetName(), err)
		}
	}
	for i := range r.Nodes {
		if _, err := fl.cs.CoreV1().Nodes().Create(ctx, &r.Nodes[i], metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestFollowControllerJoin: the whole join against the real API server.
// A Node object whose InternalIP is in site B's node CIDRs is assigned,
// given a pod block and published by the controller; gateway B follows
// and routes the block to the node; a ping from site A's pod to an
// address of the block answers, measured from the Node's creation, over
// 20 joins. Deleting the Node withdraws its route.
//
// Site A publishes a relay (spec.relay): gateway A, which has none in
// its config, serves CONNECT to site B's node from the followed catalog,
// and a change of the Site's relay reaches it through the reload.
func TestFollowControllerJoin(t *testing.T) {
	var dyn dynamic.Interface
	fl := startFollowLabWith(t, func(fl *followLab) {
		runController(t, fl, func(d dynamic.Interface, r *kube.Resources) func() {
			dyn = d
			for i := range r.Sites {
				if r.Sites[i].Name == "site-a" {
					r.Sites[i].Spec.Relay = &v1.RelaySpec{Port: 8131, HeaderTimeout: &metav1.Duration{Duration: 30 * time.Second}}
				}
			}
			return nil
		})
	})
	fl.waitPing(podB, 20*time.Second)
	followedRelay(t, fl, dyn)
	// Every address of site B's pod CIDR answers on site B's node once
	// gateway B routes it there.
	fl.mustExec("b-node", "ip", "route", "add", "local", "10.245.0.0/16", "dev", "lo")

	ctx := context.Background()
	const joins = 20
	var took []time.Duration
	var names []string
	for i := range joins {
		addr := netip.AddrFrom4([4]byte{192, 168, 50, byte(20 + i)})
		fl.mustExec("b-node", "ip", "addr", "add", addr.String()+"/24", "dev", "eth0")
		name := fmt.Sprintf("node-b-join%02d", i)
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: addr.String()}}
		start := time.Now()
		if _, err := fl.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		var block netip.Prefix
		for !block.IsValid() {
			got, err := fl.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range got.Spec.PodCIDRs {
				if p, err := netip.ParsePrefix(c); err == nil && p.Addr().Is4() {
					block = p
				}
			}
			if time.Since(start) > 10*time.Second {
				t.Fatalf("%s: no pod block within 10 s", name)
			}
			if !block.IsValid() {
				time.Sleep(10 * time.Millisecond)
			}
		}
		allocated := time.Since(start)
		pod := block.Addr().Next().String()
		took = append(took, fl.waitPing(pod, 10*time.Second).Sub(start))
		names = append(names, name)
		t.Logf("join %d: %s block %s allocated after %v, %s answered after %v", i, name, block, allocated.Round(time.Millisecond), pod, took[i].Round(time.Millisecond))
	}
	t.Logf("Node created to ping answered (real controller, an echo every 20 ms) over %d joins: p50 %v, p99 %v, max %v",
		joins, percentile(took, 0.5).Round(time.Millisecond), percentile(took, 0.99).Round(time.Millisecond), slices.Max(took).Round(time.Millisecond))
	if p99 := percentile(took, 0.99); p99 > 2*time.Second {
		t.Errorf("p99 Node creation to ping %v, over 2 s", p99)
	}

	// Delete the first joined Node: gateway B's route to it goes.
	got, err := fl.cs.CoreV1().Nodes().Get(ctx, names[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	block := got.Spec.PodCIDRs[0]
	start := time.Now()
	if err := fl.cs.CoreV1().Nodes().Delete(ctx, names[0], metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for {
		out := fl.mustExec("b-gw", "ip", "route", "show", block)
		if strings.TrimSpace(out) == "" {
			break
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("route of the deleted Node still there after 15 s: %s", out)
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("deleted Node's route %s withdrawn from gateway B %v after the delete", block, time.Since(start).Round(time.Millisecond))
	if b, err := os.ReadFile(filepath.Join(fl.dir, "b-catalog.yaml")); err != nil || strings.Contains(string(b), names[0]) {
		t.Errorf("gateway B's catalog file still lists %s (%v)", names[0], err)
	}
}

// tWriter sends log lines to t.Log.
type tWriter struct{ t *testing.T }

func (w *tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// TestFollowRegistration: gateway A's Gateway is admitted without a key
// in its spec (the key comes from registration). A reimaged with a new
// key starts from its cached catalog (which lists its old key), publishes
// the new key in its Gateway's status, the controller publishes it, and
// gateway B follows and starts a session with it: site A's pod reaches
// site B's again, with no edit of any file or object by hand.
func TestFollowRegistration(t *testing.T) {
	const gwA = "site-a.gw-a1"
	var oldKey string
	var dyn dynamic.Interface
	fl := startFollowLabWith(t, func(fl *followLab) {
		runController(t, fl, func(d dynamic.Interface, r *kube.Resources) func() {
			dyn = d
			for i := range r.Gateways {
				if r.Gateways[i].Name == gwA {
					oldKey = r.Gateways[i].Spec.PublicKey
					r.Gateways[i].Spec.PublicKey = ""
				}
			}
			// As if gateway A had registered before: its key in status.
			// Nothing else writes the Gateway's status yet (the
			// controller starts after this, the lab's gateways do not
			// register until they follow), so the plain update holds.
			return func() { setStatusKey(t, d, gwA, oldKey) }
		})
	})
	fl.waitPing(podB, 20*time.Second)
	pidB := fl.gw["b"].Process.Pid

	// Reimage: a new key, the same config and cached catalog.
	fl.stopGateway("a", fl.gw["a"].Process.Pid)
	keyFile := filepath.Join(fl.dir, "a.key")
	if err := os.Remove(keyFile); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(filepath.Join(fl.bin, "bridgehead"), "genkey", "-o", keyFile).CombinedOutput(); err != nil {
		t.Fatalf("genkey: %v\n%s", err, out)
	}
	pub := exec.Command(filepath.Join(fl.bin, "bridgehead"), "pubkey")
	pub.Stdin, _ = os.Open(keyFile)
	out, err := pub.Output()
	if err != nil {
		t.Fatal(err)
	}
	newKey := strings.TrimSpace(string(out))
	start := time.Now()
	fl.startGateway("a")
	ctx := context.Background()
	for {
		u, err := dyn.Resource(controller.GatewaysGVR).Get(ctx, gwA, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if k, _, _ := unstructured.NestedString(u.Object, "status", "publicKey"); k == newKey {
			break
		}
		if time.Since(start) > 30*time.Second {
			t.Fatalf("the new key is not in %s's status within 30 s", gwA)
		}
		time.Sleep(20 * time.Millisecond)
	}
	registered := time.Since(start)
	// Gateway B learns the new key only from the catalog it follows, so
	// the ping answers only after B followed it; kube/follow writes the
	// catalog file before it reloads the gateway, so the file checked
	// below is already the one B runs.
	fl.waitPing(podB, 30*time.Second)
	t.Logf("reimaged gateway A: new key in its Gateway status %v after its start, site A's pod reaches site B's %v after it",
		registered.Round(time.Millisecond), time.Since(start).Round(time.Millisecond))
	if b, err := os.ReadFile(filepath.Join(fl.dir, "b-catalog.yaml")); err != nil || !strings.Contains(string(b), newKey) {
		t.Errorf("gateway B's catalog file lacks the new key (%v)", err)
	}
	if fl.gw["b"].Process.Pid != pidB || syscall.Kill(pidB, 0) != nil {
		t.Error("gateway B restarted")
	}
	if b, _ := os.ReadFile(filepath.Join(fl.dir, "a.log")); !strings.Contains(string(b), "followed catalog lists") {
		t.Log("gateway A did not warn about its old key in the cached catalog")
	}
}

// setStatusKey writes a Gateway's status.publicKey as its registration
// would.
func setStatusKey(t *testing.T, dyn dynamic.Interface, name, key string) {
	t.Helper()
	ctx := context.Background()
	u, err := dyn.Resource(controller.GatewaysGVR).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, key, "status", "publicKey"); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(controller.GatewaysGVR).UpdateStatus(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// followedRelay: gateway A's relay, which only the Site's published
// relay configures, answers a CONNECT to site B's node (a listener the
// test opens there on the kubelet's port) and refuses another port; the
// Site's allowed ports changed, the followed reload refuses the
// kubelet's port too.
func followedRelay(t *testing.T, fl *followLab, dyn dynamic.Interface) {
	t.Helper()
	ln, err := listenIn(fl.ns("b-node"), nodeB+":"+kubeletPort)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	kubelet := nodeB + ":" + kubeletPort
	waitConnect := func(dst string, want int, within time.Duration) {
		t.Helper()
		deadline := time.Now().Add(within)
		got := 0
		for got = fl.connectStatus(relayAddr, dst); got != want; got = fl.connectStatus(relayAddr, dst) {
			if time.Now().After(deadline) {
				t.Fatalf("CONNECT %s via %s: status %d, want %d within %v", dst, relayAddr, got, want, within)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	waitConnect(kubelet, 200, 10*time.Second)
	if got := fl.connectStatus(relayAddr, nodeB+":22"); got != 403 {
		t.Errorf("CONNECT to port 22 via the followed relay: %d, want 403", got)
	}
	start := time.Now()
	patch := []byte(`{"spec":{"relay":{"allowedPorts":[10255]}}}`)
	if _, err := dyn.Resource(controller.SitesGVR).Patch(context.Background(), "site-a", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitConnect(kubelet, 403, 15*time.Second)
	t.Logf("followed relay: CONNECT to %s answered 200, then 403 %v after the Site's allowedPorts changed", kubelet, time.Since(start).Round(time.Millisecond))
}

// connectStatus sends one CONNECT for dst to the relay at relay from
// site A's node namespace; 0 when the relay does not answer.
func (fl *followLab) connectStatus(relay, dst string) int {
	var c net.Conn
	if err := inNetns(fl.ns("a-node"), func() (err error) {
		c, err = net.DialTimeout("tcp", relay, 2*time.Second)
		return err
	}); err != nil {
		return 0
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", dst, dst)
	resp, err := http.ReadResponse(bufio.NewReader(c), &http.Request{Method: http.MethodConnect})
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}
