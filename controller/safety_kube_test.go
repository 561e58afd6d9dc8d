package controller

import (
	"context"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	testingclock "k8s.io/utils/clock/testing"

	"github.com/bridgehead/bridgehead/controller/ipam"
)

// gauge reads a gauge of reg by name (no labels); ok is false when the
// registry has no such metric.
func gauge(t *testing.T, reg *prometheus.Registry, name string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) > 0 {
			return mf.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestKubeStaleNodeWriteRefused: a leader that read a Node, was paused
// (GC, a partition) and lost the lease, then lands the patch it computed
// from that old object: the API server must refuse it when the Node
// changed since (a new leader gave it a range), and accept it when not.
func TestKubeStaleNodeWriteRefused(t *testing.T) {
	h := startKube(t)
	ctx := context.Background()
	// The old leader: a Controller that never runs; patchNode is its write.
	old, err := New(Options{Client: h.cs, Dynamic: h.dyn, Logger: slog.New(slog.NewTextHandler(&tWriter{t: t, prefix: "old: "}, nil)),
		Registry: prometheus.NewRegistry(), Namespace: testNS})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, q := range []interface{ ShutDown() }{old.nodeQueue, old.siteQueue, old.catalogQueue, old.releaseQueue} {
			q.ShutDown()
		}
		old.broadcaster.Shutdown()
	})
	for _, tc := range []struct {
		name      string
		newLeader string // the JSON merge patch the new leader wrote since the old one read the Node; "" none
		wantErr   bool
		wantAnn   string // the annotation after the old leader's write
	}{
		{"new leader gave the node a range", `{"metadata":{"labels":{"bridgehead.io/site":"site-a"},"annotations":{"bridgehead.io/pod-cidrs":"10.100.5.0/24"}},"spec":{"podCIDR":"10.100.5.0/24","podCIDRs":["10.100.5.0/24"]}}`, true, "10.100.5.0/24"},
		{"node changed otherwise", `{"metadata":{"labels":{"example.com/x":"y"}}}`, true, ""},
		{"node unchanged", "", false, "10.100.9.0/24"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "bhc-stale-" + strings.ReplaceAll(tc.name, " ", "-")
			if err := h.createNode(ctx, name, "10.10.0.7"); err != nil {
				t.Fatal(err)
			}
			stale, err := h.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if tc.newLeader != "" {
				if _, err := h.cs.CoreV1().Nodes().Patch(ctx, name, types.MergePatchType, []byte(tc.newLeader), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			err = old.patchNode(ctx, stale, "site-a", ipam.Blocks{V4: netip.MustParsePrefix("10.100.9.0/24")})
			if tc.wantErr != (err != nil) || (err != nil && !apierrors.IsConflict(err)) {
				t.Errorf("the old leader's write: %v, want conflict %v", err, tc.wantErr)
			}
			n, err := h.cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if got := n.Annotations[AnnotationPodCIDRs]; got != tc.wantAnn {
				t.Errorf("annotation %q after the old leader's write, want %q", got, tc.wantAnn)
			}
			t.Logf("old leader's write: %v; annotation %q, spec.podCIDRs %v", err, n.Annotations[AnnotationPodCIDRs], n.Spec.PodCIDRs)
		})
	}
}

// TestKubeLiveRangeKept: Nodes that already have a pod range keep it,
// whatever is wrong with it: a range another Node holds too (the race of
// two leaders) and a range outside the Site's pool. Each gets the
// BridgeheadSite=False condition saying what to do and an Event; the
// audit reports the double allocation (metric and Event).
func TestKubeLiveRangeKept(t *testing.T) {
	h := startKube(t)
	ctx := context.Background()
	h.createSite(t, "site-a", []string{"10.10.0.0/16"}, []string{"10.100.0.0/16"}, 24, 64)
	withRange := func(name, ip, cidr string) {
		t.Helper()
		n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelSite: "site-a"},
			Annotations: map[string]string{AnnotationPodCIDRs: cidr}},
			Spec: corev1.NodeSpec{PodCIDR: cidr, PodCIDRs: []string{cidr}}}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}}
		if _, err := h.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	withRange("bhc-keep-a", "10.10.0.1", "10.100.5.0/24")
	withRange("bhc-keep-b", "10.10.0.2", "10.100.5.0/24")  // the same block: two leaders raced
	withRange("bhc-keep-out", "10.10.0.3", "10.99.0.0/24") // outside the pool
	if err := h.createNode(ctx, "bhc-keep-new", "10.10.0.4"); err != nil {
		t.Fatal(err)
	}
	in := h.start(t, "bhc-keep", nil)
	waitLeader(t, h, in, 30*time.Second)
	h.obs.waitFor(t, 15*time.Second, "bhc-keep-new allocated", func() bool { return allocated(h.obs.node("bhc-keep-new")) })

	for _, tc := range []struct {
		node, ann, reason string
	}{
		{"bhc-keep-a", "10.100.5.0/24", ""},
		{"bhc-keep-b", "10.100.5.0/24", "PodRangeConflict"},
		{"bhc-keep-out", "10.99.0.0/24", "PodRangeOutsidePool"},
	} {
		if tc.reason != "" {
			h.obs.waitFor(t, 15*time.Second, tc.node+" BridgeheadSite=False "+tc.reason+" or a new range", func() bool {
				n := h.obs.node(tc.node)
				return n != nil && (siteCondition(n).Status == corev1.ConditionFalse || n.Annotations[AnnotationPodCIDRs] != tc.ann)
			})
			if got := h.obs.node(tc.node).Annotations[AnnotationPodCIDRs]; got != tc.ann {
				t.Fatalf("%s: annotation rewritten from %q to %q", tc.node, tc.ann, got)
			}
			h.obs.waitFor(t, 15*time.Second, tc.node+" BridgeheadSite=False "+tc.reason, func() bool {
				n := h.obs.node(tc.node)
				return n != nil && siteCondition(n).Status == corev1.ConditionFalse && siteCondition(n).Reason == tc.reason
			})
			c := siteCondition(h.obs.node(tc.node))
			t.Logf("%s: BridgeheadSite=False %s: %s", tc.node, c.Reason, c.Message)
			if !strings.Contains(c.Message, tc.ann) || !strings.Contains(c.Message, "drain") {
				t.Errorf("%s: the condition's message names no range or remedy: %s", tc.node, c.Message)
			}
			h.waitEvent(t, "Node", tc.node, tc.reason)
		}
		n := h.obs.node(tc.node)
		if got := n.Annotations[AnnotationPodCIDRs]; got != tc.ann {
			t.Errorf("%s: annotation rewritten from %q to %q", tc.node, tc.ann, got)
		}
		if len(n.Spec.PodCIDRs) != 1 || n.Spec.PodCIDRs[0] != tc.ann {
			t.Errorf("%s: spec.podCIDRs %v", tc.node, n.Spec.PodCIDRs)
		}
	}
	if c := siteCondition(h.obs.node("bhc-keep-a")); c.Status == corev1.ConditionFalse {
		t.Errorf("bhc-keep-a (the first holder) has %s: %s", c.Reason, c.Message)
	}
	// The audit: one block held by two Nodes.
	waitTrue(t, 15*time.Second, "bridgehead_controller_double_allocations 1", func() bool {
		v, _ := gauge(t, in.reg, "bridgehead_controller_double_allocations")
		return v == 1
	})
	h.waitEvent(t, "Node", "bhc-keep-b", "DoubleAllocation")
}

// TestKubeSiteFinalizerAndAudit: a Site cannot go while a Node holds a
// block of it (the finalizer), and goes once none does; the audit runs
// on the injected clock's ticks and reports a double allocation that
// appears, and that it is gone.
func TestKubeSiteFinalizerAndAudit(t *testing.T) {
	h := startKube(t)
	ctx := context.Background()
	h.createSite(t, "site-a", []string{"10.10.0.0/16"}, []string{"10.100.0.0/16"}, 24, 64)
	clk := testingclock.NewFakeClock(time.Now())
	in := h.start(t, "bhc-fin", func(o *Options) { o.Clock = clk })
	waitLeader(t, h, in, 30*time.Second)
	if err := h.createNode(ctx, "bhc-fin-1", "10.10.0.1"); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "bhc-fin-1 allocated", func() bool { return allocated(h.obs.node("bhc-fin-1")) })
	h.obs.waitFor(t, 15*time.Second, "site-a finalizer", func() bool {
		s := h.obs.site("site-a")
		return s != nil && slices.Contains(s.Finalizers, FinalizerPodBlocks)
	})

	// The audit: a Node written by hand with bhc-fin-1's block, seen at
	// the next tick (the controller never rewrites it).
	block := h.obs.node("bhc-fin-1").Annotations[AnnotationPodCIDRs]
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bhc-fin-dup", Annotations: map[string]string{AnnotationPodCIDRs: block}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.10.0.2"}}
	if _, err := h.cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "bhc-fin-dup in the cache", func() bool { return h.obs.node("bhc-fin-dup") != nil })
	waitTrue(t, 15*time.Second, "double_allocations 1 after a tick", func() bool {
		clk.Step(time.Minute)
		v, _ := gauge(t, in.reg, "bridgehead_controller_double_allocations")
		return v == 1
	})
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "bhc-fin-dup", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitTrue(t, 15*time.Second, "double_allocations 0 after a tick", func() bool {
		clk.Step(time.Minute)
		v, _ := gauge(t, in.reg, "bridgehead_controller_double_allocations")
		return v == 0
	})

	// Deleting the Site waits for its Node.
	if err := h.dyn.Resource(SitesGVR).Delete(ctx, "site-a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "site-a marked deleted", func() bool {
		s := h.obs.site("site-a")
		return s != nil && s.DeletionTimestamp != nil
	})
	// The controller's own cache, not only the observer's, has the
	// deletion before the node joins: the two watches are not ordered
	// (under load the controller's lagged, and the node took a block of
	// site-a; reconcileNode now applies pending Site events first).
	waitTrue(t, 15*time.Second, "the controller's cache has site-a deleted", func() bool {
		o, err := in.c.sites.Get("site-a")
		m, ok := o.(metav1.Object)
		return err == nil && ok && m.GetDeletionTimestamp() != nil
	})
	if err := h.createNode(ctx, "bhc-fin-late", "10.10.0.3"); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "bhc-fin-late NoSite (a Site being deleted takes no node)", func() bool {
		n := h.obs.node("bhc-fin-late")
		return n != nil && siteCondition(n).Reason == "NoSite"
	})
	if s := h.obs.site("site-a"); s == nil {
		t.Fatal("site-a went while bhc-fin-1 holds a block of it")
	}
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "bhc-fin-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "site-a gone after its node", func() bool { return h.obs.site("site-a") == nil })
}
