//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func intstrPort(p int) intstr.IntOrString { return intstr.FromInt32(int32(p)) }

// TestNodesReady: every node is Ready with the node agent's condition
// Configured, and the log says how long each took from registration
// (NotReady, "cni plugin not initialized") to Ready.
func TestNodesReady(t *testing.T) {
	list, err := client(t).CoreV1().Nodes().List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, n := range list.Items {
		seen[n.Name] = true
		var ready, net *corev1.NodeCondition
		for i, c := range n.Status.Conditions {
			switch c.Type {
			case corev1.NodeReady:
				ready = &n.Status.Conditions[i]
			case "BridgeheadNodeNetwork":
				net = &n.Status.Conditions[i]
			}
		}
		if ready == nil || ready.Status != corev1.ConditionTrue {
			t.Errorf("node %s not Ready: %+v", n.Name, ready)
			continue
		}
		if net == nil || net.Status != corev1.ConditionTrue || net.Reason != "Configured" {
			t.Errorf("node %s: BridgeheadNodeNetwork %+v", n.Name, net)
		}
		if got := n.Labels["bridgehead.io/site"]; got != siteOf[n.Name] {
			t.Errorf("node %s: site %q, want %q", n.Name, got, siteOf[n.Name])
		}
		t.Logf("node %s (%s): registered %s, Ready %s: %.0f s", n.Name, siteOf[n.Name],
			n.CreationTimestamp.UTC().Format(time.TimeOnly), ready.LastTransitionTime.UTC().Format(time.TimeOnly),
			ready.LastTransitionTime.Sub(n.CreationTimestamp.Time).Seconds())
	}
	for _, n := range nodes {
		if !seen[n] {
			t.Errorf("no node %s", n)
		}
	}
}

// TestPodToPod: pods on every node reach each other on the same node, in
// the same site and across sites, over TCP and UDP, and the server sees
// the client pod's own address: no SNAT between sites (NetworkPolicy by
// pod needs it at the destination node).
func TestPodToPod(t *testing.T) {
	ns := namespace(t, testNS+"-p2p")
	var pods []*corev1.Pod
	for _, n := range nodes {
		pods = append(pods, server("s-"+n, n, nil))
	}
	pods = append(pods, server("s-a1-2", "a1", nil))
	got := startPods(t, ns, pods...)
	for _, tc := range []struct{ name, from, to string }{
		{"same node", "s-a1", "s-a1-2"},
		{"same site", "s-a1", "s-a2"},
		{"site A to B", "s-a1", "s-b1"},
		{"site A to B, other nodes", "s-a2", "s-b2"},
		{"site B to A", "s-b2", "s-a1"},
		{"same site B", "s-b1", "s-b2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src, dst := got[tc.from].Status.PodIP, got[tc.to].Status.PodIP
			out, err := execIn(t, ns, tc.from, fmt.Sprintf("curl -sS -m 5 http://%s:8080/clientip", dst))
			if err != nil {
				t.Fatalf("%s -> %s over TCP: %v %s", tc.from, tc.to, err, out)
			}
			if host, _, _ := net.SplitHostPort(out); host != src {
				t.Errorf("%s -> %s: the server saw %q, want the client pod's own %s (no SNAT)", tc.from, tc.to, out, src)
			}
			out, err = execIn(t, ns, tc.from, fmt.Sprintf("echo clientip | nc -u -w 2 %s 8081", dst))
			if err != nil || !strings.HasPrefix(out, src+":") {
				t.Errorf("%s -> %s over UDP: %q %v, want %s:port", tc.from, tc.to, out, err, src)
			}
		})
	}
}

// TestServices: a ClusterIP Service whose only endpoints are in site B,
// reached from a pod in site A, by name through CoreDNS from both sites;
// and its NodePort on a node of each site.
func TestServices(t *testing.T) {
	ns := namespace(t, testNS+"-svc")
	cs := client(t)
	ctx := context.Background()
	labels := map[string]string{"app": "backend"}
	startPods(t, ns, server("backend-b1", "b1", labels), server("backend-b2", "b2", labels),
		server("client-a1", "a1", nil), server("client-b1", "b1", nil))
	svc, err := cs.CoreV1().Services(ns).Create(ctx, &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "backend"},
		Spec: corev1.ServiceSpec{Type: corev1.ServiceTypeNodePort, Selector: labels,
			Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstrPort(8080)}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	nodePort := svc.Spec.Ports[0].NodePort
	name := "backend." + ns + ".svc.cluster.local"
	for _, tc := range []struct{ name, from, url string }{
		{"ClusterIP from site A", "client-a1", "http://" + svc.Spec.ClusterIP + "/hostname"},
		{"by name from site A", "client-a1", "http://" + name + "/hostname"},
		{"by name from site B", "client-b1", "http://" + name + "/hostname"},
		{"NodePort on a node of site A", "client-a1", fmt.Sprintf("http://%s:%d/hostname", nodeIP["a2"], nodePort)},
		{"NodePort on a node of site B, from site A", "client-a1", fmt.Sprintf("http://%s:%d/hostname", nodeIP["b2"], nodePort)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			backends := map[string]bool{}
			eventually(t, tc.url, 60*time.Second, func() error {
				out, err := execIn(t, ns, tc.from, "curl -sS -m 5 "+tc.url)
				if err != nil {
					return fmt.Errorf("%v: %s", err, out)
				}
				if !strings.HasPrefix(out, "backend-b") {
					return fmt.Errorf("answered by %q, want a backend in site B", out)
				}
				backends[out] = true
				return nil
			})
		})
	}
	for _, from := range []string{"client-a1", "client-b1"} {
		out, err := execIn(t, ns, from, "dig +short "+name)
		if err != nil || out != svc.Spec.ClusterIP {
			t.Errorf("DNS from %s: %s = %q %v, want %s", from, name, out, err, svc.Spec.ClusterIP)
		}
	}
}

// TestEgress: a pod's traffic to a server outside the cluster leaves
// with its node's address (the node agent's SNAT), from both sites.
func TestEgress(t *testing.T) {
	ns := namespace(t, testNS+"-egress")
	srv := inNamespace("inet", agnhostBinary(), "netexec", "--http-port=8080", "--udp-port=-1")
	if err := srv.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Process.Kill(); _ = srv.Wait() })
	startPods(t, ns, server("c-a2", "a2", nil), server("c-b2", "b2", nil))
	for pod, node := range map[string]string{"c-a2": "a2", "c-b2": "b2"} {
		var out string
		eventually(t, "egress from "+pod, 30*time.Second, func() error {
			var err error
			out, err = execIn(t, ns, pod, "curl -sS -m 5 http://"+outside+":8080/clientip")
			return err
		})
		if host, _, _ := net.SplitHostPort(out); host != nodeIP[node] {
			t.Errorf("egress from %s on %s seen as %q, want the node's %s", pod, node, out, nodeIP[node])
		}
	}
}
