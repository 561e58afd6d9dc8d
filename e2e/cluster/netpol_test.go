//go:build cluster

package cluster

import (
	"bufio"
	"context"
	"encoding/json"
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
// the other does not, also after the server node's agent restarts. An
// iperf3 stream under an allow rule survives a change of the policies
// with no stall, and a client the change denies is cut from new
// connections within a second (established connections are
// conntrack's, and stay).
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

	// An iperf3 stream from frontend to db:9000 (a rule of its own)
	// while the policies change: frontend's HTTP rule goes and other gets
	// one. The stream carries on; frontend's new HTTP connections, tried
	// every 50 ms in the pod itself with the start time of each, are
	// refused from some moment on: the gap to the change is the cut-off
	// time.
	srv := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "db", "--", "iperf3", "-s", "-p", "9000")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Process.Kill(); _ = srv.Wait() }()
	allow9000 := np("db-9000-from-frontend", "frontend")
	p9000 := intstr.FromInt32(9000)
	allow9000.Spec.Ingress[0].Ports = []networkingv1.NetworkPolicyPort{{Port: &p9000}}
	create(allow9000)
	eventually(t, "a 1 s iperf3 run from frontend to db:9000", 30*time.Second, func() error {
		out, err := execIn(t, ns, "frontend", fmt.Sprintf("timeout 5 iperf3 -c %s -p 9000 -t 1", db))
		if err != nil {
			return fmt.Errorf("%v: %s", err, out)
		}
		return nil
	})
	// -R: db sends, frontend receives, so the intervals frontend reports
	// are what arrived; 20 Mbit/s leaves the nodes' cores to the agents.
	const streamFor, every, rate = 10, 0.2, "20M"
	streamOut := new(strings.Builder)
	stream := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "frontend", "--",
		"iperf3", "-c", db, "-p", "9000", "-R", "-J", "-t", fmt.Sprint(streamFor), "-i", fmt.Sprint(every), "-b", rate)
	stream.Stdout = streamOut
	if err := stream.Start(); err != nil {
		t.Fatal(err)
	}
	probe := exec.Command(kubectl, "--kubeconfig", kubecfg, "-n", ns, "exec", "frontend", "--", "sh", "-c",
		fmt.Sprintf(`end=$(($(date +%%s)+8)); while [ "$(date +%%s)" -lt $end ]; do s=$(date +%%s.%%N); if curl -s -m 0.3 -o /dev/null http://%s:8080/healthz; then r=ok; else r=fail; fi; echo "$s $r"; sleep 0.05; done`, db))
	probeOut, err := probe.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := probe.Start(); err != nil {
		t.Fatal(err)
	}
	var probes []string
	probed := make(chan struct{})
	go func() {
		defer close(probed)
		sc := bufio.NewScanner(probeOut)
		for sc.Scan() {
			probes = append(probes, strings.TrimSpace(sc.Text()))
		}
	}()
	time.Sleep(3 * time.Second) // the stream established, the probe answered
	if err := cs.NetworkingV1().NetworkPolicies(ns).Delete(ctx, "db-from-frontend", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	changed := time.Now()
	create(np("db-from-other", "other"))
	eventually(t, "other allowed", 30*time.Second, func() error { return reach("other") })
	<-probed
	_ = probe.Wait()
	streamErr := stream.Wait()

	// The cut: the first refused attempt started after the change (an
	// upper bound), the last answered one (a lower bound); none answered
	// after the first refusal.
	var cut, lastOK time.Duration
	var okAfter, before int
	for _, l := range probes {
		f := strings.Fields(l)
		if len(f) != 2 {
			continue
		}
		var sec float64
		if _, err := fmt.Sscanf(f[0], "%f", &sec); err != nil {
			continue
		}
		at := time.Unix(0, int64(sec*1e9)).Sub(changed)
		switch {
		case at < 0:
			if f[1] == "ok" {
				before++
			}
		case f[1] == "fail" && cut == 0:
			cut = at
		case f[1] == "ok" && cut == 0:
			lastOK = at
		case f[1] == "ok":
			okAfter++
		}
	}
	t.Logf("frontend's new connections refused %v after the policy change (last answered at +%v)",
		cut.Round(10*time.Millisecond), lastOK.Round(10*time.Millisecond))
	if before == 0 || cut == 0 || okAfter > 0 {
		t.Errorf("frontend's new connections: %d answered before the change, first refused at +%v, %d answered after that; probes:\n%s",
			before, cut, okAfter, strings.Join(probes, "\n"))
	}
	if cut > time.Second {
		t.Errorf("frontend's new connections refused %v after the change, want within 1 s", cut)
	}

	// The stream: iperf3 ended without an error, every interval carried
	// data (no stall of a whole interval, which a reset or a dropped
	// flow would leave), and it ran its full time.
	var res struct {
		Error string `json:"error"`
		Start struct {
			Timestamp struct {
				Timesecs int64
			} `json:"timestamp"`
		} `json:"start"`
		Intervals []struct {
			Sum struct {
				Start, End float64
				Bytes      int64
			} `json:"sum"`
		} `json:"intervals"`
		End struct {
			SumReceived struct {
				Seconds float64
				Bytes   int64
			} `json:"sum_received"`
		} `json:"end"`
	}
	if err := json.Unmarshal([]byte(streamOut.String()), &res); err != nil {
		t.Fatalf("the stream's iperf3 -J output (%v): %v\n%s", streamErr, err, streamOut)
	}
	minBytes := int64(-1)
	var stalls []string
	for _, iv := range res.Intervals {
		if iv.Sum.End-iv.Sum.Start < every/2 {
			continue // the last, partial interval
		}
		if minBytes < 0 || iv.Sum.Bytes < minBytes {
			minBytes = iv.Sum.Bytes
		}
		if iv.Sum.Bytes == 0 {
			stalls = append(stalls, fmt.Sprintf("%.1f-%.1f s", iv.Sum.Start, iv.Sum.End))
		}
	}
	t.Logf("frontend's iperf3 stream across the change: %d bytes in %.1f s, %d intervals of %.1f s, the smallest %d bytes",
		res.End.SumReceived.Bytes, res.End.SumReceived.Seconds, len(res.Intervals), every, minBytes)
	// The change came while the stream ran: at least a second after its
	// start (a whole second: timesecs is cut to one), a second before its end.
	into := changed.Sub(time.Unix(res.Start.Timestamp.Timesecs, 0))
	t.Logf("the policy change came %v into the stream", into.Round(100*time.Millisecond))
	if into < time.Second || into > (streamFor-1)*time.Second {
		t.Errorf("the policy change came %v into the %d s stream, not while it ran", into, streamFor)
	}
	if streamErr != nil || res.Error != "" {
		t.Errorf("the stream from frontend did not survive the policy change: %v %s", streamErr, res.Error)
	}
	if len(stalls) > 0 {
		t.Errorf("the stream stalled in %s", strings.Join(stalls, ", "))
	}
	if res.End.SumReceived.Seconds < streamFor-1 || len(res.Intervals) < int(streamFor/every)-1 {
		t.Errorf("the stream ran %.1f s in %d intervals, want %d s", res.End.SumReceived.Seconds, len(res.Intervals), streamFor)
	}
}
