package controller

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// TestFakeReconcile drives the controller against client-go's fake
// clientsets (a unit test of the reconcile logic; the Kube tests run it
// against a real API server).
func TestFakeReconcile(t *testing.T) {
	dyn := fakeDynamic(t, testSite("a", []v1alpha1.CIDR{"10.1.0.0/16"}, []v1alpha1.CIDR{"10.101.0.0/16", "fd65::/56"}))
	node := func(name, ip string, podCIDRs ...string) *corev1.Node {
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, CreationTimestamp: metav1.Now()}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		n.Spec.PodCIDRs = podCIDRs
		if len(podCIDRs) > 0 {
			n.Spec.PodCIDR = podCIDRs[0]
		}
		return n
	}
	cs := fake.NewClientset(
		node("fresh", "10.1.0.1"),
		node("adopted", "10.1.0.2", "10.101.7.0/24"),
		node("outside", "10.1.0.3", "192.168.0.0/24"),
		node("lost", "172.16.0.1"),
	)
	_, ctx := runFake(t, cs, dyn)
	get := func(name string) *corev1.Node {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		f, a, o := get("fresh"), get("adopted"), get("outside")
		if f.Annotations[AnnotationPodCIDRs] != "" && a.Annotations[AnnotationPodCIDRs] != "" && o.Annotations[AnnotationPodCIDRs] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not allocated: %v %v %v", f.Annotations, a.Annotations, o.Annotations)
		}
		time.Sleep(20 * time.Millisecond)
	}
	f, a, o, l := get("fresh"), get("adopted"), get("outside"), get("lost")
	if f.Labels[LabelSite] != "a" || len(f.Spec.PodCIDRs) != 2 || f.Annotations[AnnotationPodCIDRs] != strings.Join(f.Spec.PodCIDRs, ",") {
		t.Errorf("fresh: %v %v %v", f.Labels, f.Spec.PodCIDRs, f.Annotations)
	}
	if !strings.HasPrefix(a.Annotations[AnnotationPodCIDRs], "10.101.7.0/24,fd65:") || len(a.Spec.PodCIDRs) != 1 {
		t.Errorf("adopted: annotation %q spec %v", a.Annotations[AnnotationPodCIDRs], a.Spec.PodCIDRs)
	}
	if o.Spec.PodCIDRs[0] != "192.168.0.0/24" || strings.Contains(o.Annotations[AnnotationPodCIDRs], "192.168") {
		t.Errorf("outside: spec %v annotation %q", o.Spec.PodCIDRs, o.Annotations[AnnotationPodCIDRs])
	}
	if l.Labels[LabelSite] != "" || len(l.Spec.PodCIDRs) != 0 {
		t.Errorf("lost node assigned: %v %v", l.Labels, l.Spec.PodCIDRs)
	}
}

// TestRunBadLeaderElection: timings client-go refuses (a renew deadline
// not below the lease duration) make Run return that error at once, with
// its context still live.
func TestRunBadLeaderElection(t *testing.T) {
	c, err := New(Options{Client: fake.NewClientset(), Dynamic: fakeDynamic(t), Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(),
		Namespace: "bh", LeaderElect: true, LeaseDuration: time.Second, RenewDeadline: 2 * time.Second, RetryPeriod: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- c.Run(context.Background()) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "leaseDuration must be greater than renewDeadline") {
			t.Errorf("Run: %v, want client-go's refusal", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return within 10 s")
	}
}

// TestSiteStatusConflict: a Site status write refused with a Conflict (the
// informer's copy lagged behind a write, often the controller's own) is
// read again and written again in the same reconcile; it is counted as a
// conflict, never as a failed reconcile.
func TestSiteStatusConflict(t *testing.T) {
	dyn := fakeDynamic(t, testSite("a", []v1alpha1.CIDR{"10.1.0.0/16"}, []v1alpha1.CIDR{"10.101.0.0/16"}))
	var refused atomic.Int32
	dyn.PrependReactor("update", "sites", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() == "status" && refused.Add(1) == 1 {
			return true, nil, apierrors.NewConflict(SitesGVR.GroupResource(), "a", errors.New("the object has been modified"))
		}
		return false, nil, nil
	})
	c, ctx := runFake(t, fake.NewClientset(), dyn)
	deadline := time.Now().Add(20 * time.Second)
	for {
		got, err := dyn.Resource(SitesGVR).Get(ctx, "a", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if conds, _, _ := unstructured.NestedSlice(got.Object, "status", "conditions"); len(conds) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no Site status after %d status writes", refused.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	if v := testutil.ToFloat64(c.metrics.reconciles.WithLabelValues("site", "error")); v != 0 {
		t.Errorf("%v failed site reconciles; a conflict is read again, not failed", v)
	}
	if v := testutil.ToFloat64(c.metrics.conflicts.WithLabelValues("site")); v != 1 {
		t.Errorf("site conflicts = %v, want 1", v)
	}
}

// fakeDynamic is client-go's fake dynamic client holding sites, with the
// list kinds of the controller's resources.
func fakeDynamic(t *testing.T, sites ...*v1alpha1.Site) *dynamicfake.FakeDynamicClient {
	t.Helper()
	var objs []runtime.Object
	for _, site := range sites {
		site.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Site"}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(site)
		if err != nil {
			t.Fatal(err)
		}
		objs = append(objs, &unstructured.Unstructured{Object: u})
	}
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{SitesGVR: "SiteList", GatewaysGVR: "GatewayList"}, objs...)
}

// runFake runs a one-worker controller on the fake clients until the
// test ends (Run's error fails it) and returns it with the context it
// runs under.
func runFake(t *testing.T, cs *fake.Clientset, dyn *dynamicfake.FakeDynamicClient) (*Controller, context.Context) {
	t.Helper()
	c, err := New(Options{Client: cs, Dynamic: dyn, Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry(), Namespace: "bh", Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Error(err)
		}
	})
	return c, ctx
}
