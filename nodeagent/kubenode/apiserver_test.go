package kubenode

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/internal/kubetest"
)

// TestRealAPIServer: against a real kube-apiserver and etcd, the source
// follows a Node from "no pod range" (a Warning Event stored in the API)
// to configured once the controller's spec.podCIDRs arrives, and the
// other nodes of its site become routes.
func TestRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	client := env.Clientset(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer func() {
		cancel()
		time.Sleep(100 * time.Millisecond) // the informer, watcher and broadcaster see the end
	}()
	for _, n := range []*corev1.Node{
		node("a1", "a", nil, "10.224.0.11", "fd00:224::11"),
		node("a3", "a", []string{"10.244.9.0/24", "fd00:244:0:9::/64"}, "10.224.0.13", "fd00:224::13"),
	} {
		status := n.Status
		created, err := client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status = status
		if _, err := client.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	b := record.NewBroadcaster(record.WithContext(ctx))
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer b.Shutdown()
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "bridgehead-node", Host: "a1"})
	s, err := New(ctx, client, rec, catalog, "a1", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Load(); err == nil || !strings.Contains(err.Error(), "has no pod range yet") {
		t.Fatalf("Load without a pod range: %v", err)
	}
	waitEvent := func(reason string) {
		t.Helper()
		deadline := time.Now().Add(20 * time.Second) // a failure bound
		for {
			evs, err := client.CoreV1().Events("default").List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=a1,reason=" + reason})
			if err == nil && len(evs.Items) > 0 {
				t.Logf("event %s %s: %s", evs.Items[0].Type, evs.Items[0].Reason, evs.Items[0].Message)
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("no Event %s on Node a1 (%v)", reason, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	waitEvent(ReasonNotConfigured)

	// The controller allocates the range (spec.podCIDRs, set once).
	self, err := client.CoreV1().Nodes().Get(ctx, "a1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	self.Spec.PodCIDRs = []string{"10.244.7.0/24", "fd00:244:0:7::/64"}
	self.Spec.PodCIDR = self.Spec.PodCIDRs[0]
	if _, err := client.CoreV1().Nodes().Update(ctx, self, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		select {
		case <-s.Changed():
		case <-time.After(time.Second):
		}
		d, err := s.Load()
		if err == nil {
			var rs []string
			for _, r := range d.Routes {
				rs = append(rs, r.String())
			}
			got := strings.Join(rs, "\n")
			if d.PodCIDR.String() != "10.244.7.0/24" || !strings.Contains(got, "10.244.9.0/24 via 10.224.0.13") ||
				!strings.Contains(got, "fd00:244:0:9::/64 via fd00:224::13") {
				t.Fatalf("model %v %v, routes:\n%s", d.PodCIDR, d.PodCIDR6, got)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("still not configured: %v", err)
		}
	}
	waitEvent(ReasonConfigured)
}
