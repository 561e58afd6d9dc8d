//go:build cluster

// Package cluster tests bridgehead in the real cluster of `make cluster`
// (deploy/lab/cluster.sh): kubelets, containerd, kube-proxy and CoreDNS on
// four nodes in two sites, the control plane in site A, site B behind
// one gateway. `make cluster-test` brings the cluster up, runs these
// tests with -tags cluster and takes it down; against a running cluster:
//
//	go test -tags cluster -count=1 -v ./e2e/cluster -state out/cluster
package cluster

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

var state = flag.String("state", "../../out/cluster", "the cluster's state directory (make cluster's CLUSTER_STATE)")

// The lab's topology (deploy/lab/cluster.sh).
var (
	nodes    = []string{"a1", "a2", "b1", "b2"}
	nodeIP   = map[string]string{"a1": "10.224.0.11", "a2": "10.224.0.12", "b1": "192.168.50.11", "b2": "192.168.50.12"}
	siteOf   = map[string]string{"a1": "site-a", "a2": "site-a", "b1": "site-b", "b2": "site-b"}
	outside  = "198.18.0.100" // the server outside the cluster, namespace bhc-inet
	agnhost  = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
	prefix   = "bhc-"
	testNS   = "bh-cluster-test"
	kubectl  string
	kubecfg  string
	stateDir string
)

func TestMain(m *testing.M) {
	flag.Parse()
	var err error
	if stateDir, err = filepath.Abs(*state); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	kubecfg = filepath.Join(stateDir, "kubeconfig")
	if _, err := os.Stat(kubecfg); err != nil {
		fmt.Fprintf(os.Stderr, "no cluster at %s (make cluster): %v\n", stateDir, err)
		os.Exit(2)
	}
	kubectl = os.Getenv("KUBECTL")
	if kubectl == "" {
		kubectl = filepath.Join(os.Getenv("HOME"), ".cache/bridgehead/cluster/bin/kubectl")
	}
	os.Exit(m.Run())
}

func client(t *testing.T) kubernetes.Interface {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubecfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

// kc runs kubectl with the admin kubeconfig and returns its output.
func kc(t *testing.T, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure bound
	defer cancel()
	out, err := exec.CommandContext(ctx, kubectl, append([]string{"--kubeconfig", kubecfg}, args...)...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func mustKC(t *testing.T, args ...string) string {
	t.Helper()
	out, err := kc(t, args...)
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return out
}

// eventually retries f until it succeeds or the bound passes; the last
// error fails the test.
func eventually(t *testing.T, what string, bound time.Duration, f func() error) {
	t.Helper()
	deadline := time.Now().Add(bound)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after %s: %v", what, bound, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}

// namespace makes a fresh test namespace and deletes it at the end.
func namespace(t *testing.T, name string) string {
	t.Helper()
	cs := client(t)
	ctx := context.Background()
	_ = cs.CoreV1().Namespaces().Delete(ctx, name, metav1.DeleteOptions{})
	eventually(t, "namespace "+name+" gone", 120*time.Second, func() error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
		if err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if os.Getenv("BRIDGEHEAD_CLUSTER_KEEP") == "" {
			_ = cs.CoreV1().Namespaces().Delete(context.Background(), name, metav1.DeleteOptions{})
		}
	})
	return name
}

// server is an agnhost netexec pod (HTTP 8080, UDP 8081) on node, with
// labels.
func server(name, node string, labels map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec: corev1.PodSpec{
			NodeName:                      node,
			TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{
				Name:  "netexec",
				Image: agnhost,
				Args:  []string{"netexec", "--http-port=8080", "--udp-port=8081"},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}, {Name: "udp", ContainerPort: 8081, Protocol: corev1.ProtocolUDP}},
				ReadinessProbe: &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{
					Path: "/healthz", Port: intstrPort(8080)}}, PeriodSeconds: 1},
			}},
		},
	}
}

// startPods creates pods and waits until each is Ready; it returns them
// as the API server has them (with their IPs).
func startPods(t *testing.T, ns string, pods ...*corev1.Pod) map[string]*corev1.Pod {
	t.Helper()
	cs := client(t)
	ctx := context.Background()
	for _, p := range pods {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	out := map[string]*corev1.Pod{}
	for _, p := range pods {
		eventually(t, "pod "+p.Name+" ready", 120*time.Second, func() error {
			got, err := cs.CoreV1().Pods(ns).Get(ctx, p.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			for _, c := range got.Status.Conditions {
				if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && got.Status.PodIP != "" {
					out[p.Name] = got
					return nil
				}
			}
			return fmt.Errorf("phase %s", got.Status.Phase)
		})
	}
	return out
}

// execIn runs a shell command in pod's container and returns its output.
func execIn(t *testing.T, ns, pod, cmd string) (string, error) {
	t.Helper()
	return kc(t, "-n", ns, "exec", pod, "--", "sh", "-c", cmd)
}

// inNamespace runs cmd in one of the lab's network namespaces.
func inNamespace(ns string, cmd ...string) *exec.Cmd {
	return exec.Command("ip", append([]string{"netns", "exec", prefix + ns}, cmd...)...)
}

func agnhostBinary() string {
	return filepath.Join(os.Getenv("HOME"), ".cache/bridgehead/cluster/bin/agnhost")
}
