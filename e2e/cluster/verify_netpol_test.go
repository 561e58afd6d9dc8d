//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestVerifyNetworkPolicy: with a NetworkPolicy in the cluster,
// `bridgehead verify --collect` (as docs/concepts/network-policy.md tells
// an operator) passes while every node agent enforces; b2's agent run
// with --network-policy=false makes it FAIL naming b2 and no other node;
// b2's own agent back, it passes again.
//
// b2's agent is taken out of the DaemonSet without touching the others:
// the DaemonSet is deleted leaving its pods (orphan), b2's pod is
// replaced by a Pod of the same template with --network-policy=false, and
// at the end that Pod goes and the DaemonSet comes back as it was, its
// pods adopted.
func TestVerifyNetworkPolicy(t *testing.T) {
	ns := namespace(t, testNS+"-verify-netpol")
	cs := client(t)
	ctx := context.Background()
	// A policy that selects no pod: the check asks only whether policies
	// exist, and this one isolates nothing the other tests run.
	pol := &networkingv1.NetworkPolicy{ObjectMeta: metav1.ObjectMeta{Name: "selects-nothing"},
		Spec: networkingv1.NetworkPolicySpec{
			PodSelector: metav1.LabelSelector{MatchLabels: map[string]string{"bh-test": "none"}},
			PolicyTypes: []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}}}
	if _, err := cs.NetworkingV1().NetworkPolicies(ns).Create(ctx, pol, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	pass := func(what string) {
		t.Helper()
		eventually(t, what, 60*time.Second, func() error {
			res, line := verifyNetpol(t)
			if res != "PASS" || !strings.Contains(line, "enforced on 4 of 4 nodes") {
				return fmt.Errorf("%s", line)
			}
			return nil
		})
		_, line := verifyNetpol(t)
		t.Logf("%s: %s", what, line)
	}
	pass("every agent enforces")

	const agentsLabel = "app.kubernetes.io/component=node"
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "bridgehead-node", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	onB2, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentsLabel, FieldSelector: "spec.nodeName=b2"})
	if err != nil || len(onB2.Items) != 1 {
		t.Fatalf("the node agent on b2: %v (%d pods)", err, len(onB2.Items))
	}
	others, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentsLabel, FieldSelector: "spec.nodeName!=b2"})
	if err != nil || len(others.Items) != 3 {
		t.Fatalf("the node agents of a1, a2, b1: %v (%d pods)", err, len(others.Items))
	}
	orphan := metav1.DeletePropagationOrphan
	if err := cs.AppsV1().DaemonSets("kube-system").Delete(ctx, ds.Name, metav1.DeleteOptions{PropagationPolicy: &orphan}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the DaemonSet gone", 30*time.Second, func() error {
		if _, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, ds.Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	off := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-node-netpol-off", Namespace: "kube-system",
			Labels: map[string]string{"app.kubernetes.io/name": "bridgehead", "app.kubernetes.io/component": "node-test"}},
		Spec: *ds.Spec.Template.Spec.DeepCopy(),
	}
	off.Spec.NodeName = "b2"
	off.Spec.Containers[0].Args = append(off.Spec.Containers[0].Args, "--network-policy=false")
	restored := false
	restore := func() {
		if restored {
			return
		}
		restored = true
		_ = cs.CoreV1().Pods("kube-system").Delete(ctx, off.Name, metav1.DeleteOptions{})
		eventually(t, "the agent with policy off gone", 60*time.Second, func() error {
			if _, err := cs.CoreV1().Pods("kube-system").Get(ctx, off.Name, metav1.GetOptions{}); err == nil {
				return fmt.Errorf("still there")
			}
			return nil
		})
		again := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Name: ds.Name, Namespace: ds.Namespace, Labels: ds.Labels, Annotations: ds.Annotations},
			Spec: ds.Spec}
		if _, err := cs.AppsV1().DaemonSets("kube-system").Create(ctx, again, metav1.CreateOptions{}); err != nil {
			t.Errorf("the DaemonSet back: %v", err)
			return
		}
		eventually(t, "the DaemonSet's agent running on b2 again", 90*time.Second, func() error {
			l, err := cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{LabelSelector: agentsLabel, FieldSelector: "spec.nodeName=b2"})
			if err != nil {
				return err
			}
			for _, p := range l.Items {
				if p.Status.Phase == corev1.PodRunning && metav1.GetControllerOf(&p) != nil {
					return nil
				}
			}
			return fmt.Errorf("%d pods, none running and owned", len(l.Items))
		})
	}
	t.Cleanup(restore)
	if err := cs.CoreV1().Pods("kube-system").Delete(ctx, onB2.Items[0].Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "b2's agent gone", 60*time.Second, func() error {
		if _, err := cs.CoreV1().Pods("kube-system").Get(ctx, onB2.Items[0].Name, metav1.GetOptions{}); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
	if _, err := cs.CoreV1().Pods("kube-system").Create(ctx, off, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the check fails naming b2", 90*time.Second, func() error {
		res, line := verifyNetpol(t)
		if res != "FAIL" || !strings.Contains(line, "--network-policy=false on b2") {
			return fmt.Errorf("%s", line)
		}
		return nil
	})
	_, line := verifyNetpol(t)
	t.Logf("b2's agent with --network-policy=false: %s", line)
	if !strings.Contains(line, "not enforced on 1 of 4 nodes") {
		t.Errorf("the check names more than b2: %s", line)
	}

	restore()
	// The other agents were adopted, not restarted.
	for _, p := range others.Items {
		got, err := cs.CoreV1().Pods("kube-system").Get(ctx, p.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("%s's agent %s: %v", p.Spec.NodeName, p.Name, err)
		} else if metav1.GetControllerOf(got) == nil {
			t.Errorf("%s's agent %s was not adopted by the DaemonSet again", p.Spec.NodeName, p.Name)
		}
	}
	pass("b2's agent back")
}

// verifyNetpol runs `bridgehead verify --collect --format json` and
// returns its network policy check: the result and the whole line.
// (The matrix of the verify Job's reports is not this test's: its exit
// status is left alone.)
func verifyNetpol(t *testing.T) (string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second) // a failure bound
	defer cancel()
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, "../../bin/bridgehead", "verify", "--collect", "--catalog-namespace", "bridgehead-system",
		"--kubeconfig", kubecfg, "--format", "json")
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	_ = cmd.Run()
	if !json.Valid(stdout.Bytes()) {
		t.Fatalf("verify --collect: its matrix is not JSON: %q, stderr %s", stdout.String(), stderr.String())
	}
	const prefix = "bridgehead verify: network policy: "
	for _, l := range strings.Split(stderr.String(), "\n") {
		if rest, ok := strings.CutPrefix(l, prefix); ok {
			res, _, _ := strings.Cut(rest, " ")
			return res, rest
		}
	}
	t.Fatalf("verify --collect printed no network policy check: %s", stderr.String())
	return "", ""
}
