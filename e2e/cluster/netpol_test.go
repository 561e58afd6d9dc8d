//go:build cluster

package cluster

import (
	"bufio"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// TestNetworkPolicy: a default-deny namespace whose server runs in site
// B; of two clients in site A, the one a policy names gets through and
// the other does not, also after the server node's agent restarts. A
// TCP stream under the allow rule survives a change of the policies,
// and a client the change denies is cut from new connections within a
// second (established connections are conntrack's, and stay).
func TestNetworkPolicy(t *testing.T) {
	ns := namespace(t, testNS+"-netpol")
	cs := client(t)
	ctx := context.Background()
	pods := startPods(t, ns,
		server("db", "b1", map[string]string{"app": "db"}),
		server("frontend", "a1", map[string]string{"role": "frontend"}),
		server("other", "a2", map[string]string{"role": "other"}))
	db := pods["db"].Status.PodIP
	reach := func(from string) error {
		_, err := execIn(t, ns, from, fmt.Sprintf("curl -sS -m 2 -o /dev/null http://%s:8080/healthz", db))
		return err
	}
	for _, c := range []string{"frontend", "other"} {
		eventually(t, c+" reaches db before any policy", 30*time.Second, func() error { return reach(c) })
	}

	np := func(name string, from ...string) *networkingv1.NetworkPolicy {
		p := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{}, PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
		if len(from) > 0 {
			port := intstr.FromInt32(8080)
			p.Spec.PodSelector = metav1.LabelSelector{MatchLabels: map[string]string{"app": "db"}}
			rule := networkingv1.NetworkPolicyIngressRule{Ports: []networkingv1.NetworkPolicyPort{{Port: &port}}}
			for _, role := range from {
				rule.From = append(rule.From, networkingv1.NetworkPolicyPeer{PodSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"role": role}}})
			}
			p.Spec.Ingress = []networkingv1.NetworkPolicyIngressRule{rule}
		}
		return p
	}
	create := func(p *networkingv1.NetworkPolicy) time.Time {
		t.Helper()
		if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		return time.Now()
	}
	// refusedWithin waits until a client's new connections fail, and
	// returns how long after since that took.
	refusedWithin := func(from string, since time.Time) time.Duration {
		t.Helper()
		eventually(t, from+" refused", 30*time.Second, func() error {
			if _, err := execIn(t, ns, from, fmt.Sprintf("curl -sS -m 1 -o /dev/null http://%s:8080/healthz", db)); err == nil {
				return fmt.Errorf("still answered")
			}
			return nil
		})
		return time.Since(since)
	}

	// Default deny, then frontend only.
	create(np("default-deny"))
	create(np("db-from-frontend", "frontend"))
	eventually(t, "frontend allowed", 30*time.Second, func() error { return reach("frontend") })
	refusedWithin("other", time.Now())
	for range 3 {
		if err := reach("other"); err == nil {
			t.Fatal("other reached db through default-deny and a policy naming only frontend")
		}
	}

	// The server's node agent restarts: the table outlives it.
	agents, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
		LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=b1"})
	if err != nil || len(agents.Items) != 1 {
		t.Fatalf("the node agent on b1: %v", err)
	}
	old := agents.Items[0].Name
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "a new agent running on b1", 90*time.Second, func() error {
		l, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{
			LabelSelector: "app.kubernetes.io/component=node", FieldSelector: "spec.nodeName=b1"})
		if err != nil {
			return err
		}
		for _, p := range l.Items {
			if p.Name != old && p.Status.Phase == corev1.PodRunning {
				return nil
			}
		}
		return fmt.Errorf("not yet")
	})
	if err := reach("other"); err == nil {
		t.Error("other reached db after b1's agent restarted")
	}
	if err := reach("frontend"); err != nil {
		t.Errorf("frontend refused after b1's agent restarted: %v", err)
	}

	// A stream from frontend to db:9000 (a rule of its own) while the
	// policies change: frontend's HTTP rule goes and other gets one. The
	// stream carries on; frontend's new HTTP connections, tried every
	// 50 ms in the pod itself with the time of each, are refused from
	// some moment on: the gap to the change is the cut-off time.
	lis := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "db", "--", "sh", "-c", "nc -l -p 9000 > /dev/null")
	if err := lis.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = lis.Process.Kill(); _ = lis.Wait() }()
	allow9000 := np("db-9000-from-frontend", "frontend")
	p9000 := intstr.FromInt32(9000)
	allow9000.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: &p9000}}
	create(allow9000)
	time.Sleep(2 * time.Second) // the listener up, the rule written
	writer := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "frontend", "--", "sh", "-c",
		fmt.Sprintf("i=0; while [ $i -lt 150 ]; do echo line$i; i=$((i+1)); sleep 0.1; done | nc -q 1 %s 9000 && echo stream-ok || echo stream-broken", db))
	probe := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "frontend", "--", "sh", "-c",
		fmt.Sprintf(`i=0; while [ $i -lt 100 ]; do if curl -s -m 0.3 -o /dev/null http://%s:8080/healthz; then r=ok; else r=fail; fi; echo "$(date +%%s.%%N) $r"; sleep 0.05; i=$((i+1)); done`, db))
	lines := func(c *exec.Cmd) (func() []string, error) {
		out, err := c.StdoutPipe()
		if err != nil {
			return nil, err
		}
		if err := c.Start(); err != nil {
			return nil, err
		}
		var got []string
		done := make(chan struct{})
		go func() {
			defer close(done)
			s := bufio.NewScanner(out)
			for s.Scan() {
				got = append(got, strings.TrimSpace(s.Text()))
			}
		}()
		return func() []string { _ = c.Wait(); <-done; return got }, nil
	}
	streamOut, err := lines(writer)
	if err != nil {
		t.Fatal(err)
	}
	probeOut, err := lines(probe)
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second) // the stream established, the probe answered
	if err := cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "db-from-frontend", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	create(np("db-from-other", "other"))
	eventually(t, "other allowed", 30*time.Second, func() error { return reach("other") })
	stream, probes := streamOut(), probeOut()
	var cut time.Duration
	var okAfter int
	for _, l := range probes {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		var sec float64
		if _, err := fmt.Sscanf(f[0], "%f", &sec); err != nil {
			continue
		}
		at := time.Unix(0, int64(sec*1e9))
		switch {
		case at.Before(changed):
		case f[1] == "fail" && cut == 0:
			cut = at.Sub(changed)
		case f[1] == "ok" && cut != 0:
			okAfter++
		}
	}
	t.Logf("frontend's new connections refused %v after the policy change; its stream: %v", cut.Round(10*time.Millisecond), stream)
	if cut == 0 || okAfter > 0 {
		t.Errorf("frontend's new connections after the change: first refused at +%v, %d answered after that; probes:\n%s", cut, okAfter, strings.Join(probes, "\n"))
	}
	if len(stream) == 0 || stream[len(stream)-1] != "stream-ok" {
		t.Errorf("the established stream from frontend did not survive the policy change: %q", stream)
	}
	// The figure is the log's; this bound only catches a change that is
	// not applied at all in reasonable time (debounce 250 ms, compile
	// and write well under a second on a node).
	if cut > 5*time.Second {
		t.Errorf("frontend's new connections refused %v after the change", cut)
	}
}
