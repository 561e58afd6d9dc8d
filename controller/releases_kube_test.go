package controller

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/controller/ipam"
)

// TestKubeReleaseGraceRestart: a deleted node's block stays out of the pool
// for the grace that began with the delete, across a controller restart.
// The pool has two blocks, both held; one node is deleted, the controller
// is stopped and another one started halfway through the grace (under the
// deploy RBAC's token), and a new node is created at once: it must wait
// until the grace that began with the delete ends, then get the block —
// not get it at once (the new leader rebuilt from the Nodes alone and
// knew nothing of the delete), and not a grace after the restart. Then a
// node is deleted while no replica runs: its grace starts when the next
// leader finds it in the published catalog and not in the Nodes.
func TestKubeReleaseGraceRestart(t *testing.T) {
	h := startKube(t)
	h.env.ApplyFiles(t, deployRBAC...)
	sa := h.env.ServiceAccountConfig(t, testNS, controllerSA)
	saCS, saDyn := kubernetes.NewForConfigOrDie(sa), dynamic.NewForConfigOrDie(sa)
	const grace = 8 * time.Second
	opts := func(o *Options) { o.Client, o.Dynamic, o.ReleaseGrace = saCS, saDyn, grace }
	h.createSite(t, "rg", []string{"10.40.0.0/24"}, []string{"10.140.0.0/23"}, 24, 64) // two blocks
	h.createGateway(t, "rg", "gw1", "10.40.0.1", "192.0.2.40:51820")
	a := h.start(t, "bhc-rg-a", opts)
	waitLeader(t, h, a, 30*time.Second)
	ctx := context.Background()
	for i, ip := range []string{"10.40.0.11", "10.40.0.12"} {
		if err := h.createNode(ctx, "bhc-rg-"+string(rune('1'+i)), ip); err != nil {
			t.Fatal(err)
		}
	}
	h.obs.waitFor(t, 15*time.Second, "both nodes allocated", func() bool {
		return allocated(h.obs.node("bhc-rg-1")) && allocated(h.obs.node("bhc-rg-2"))
	})
	released := h.obs.node("bhc-rg-1").Spec.PodCIDRs[0]

	deleted := time.Now()
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "bhc-rg-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// The leader records the grace (the releases ConfigMap, read here as
	// the admin; it is no informer's object).
	waitTrue(t, 10*time.Second, "the release recorded", func() bool {
		cm, err := h.cs.CoreV1().ConfigMaps(testNS).Get(ctx, ReleasesName, metav1.GetOptions{})
		return err == nil && strings.HasPrefix(cm.Data[releasesKey], "bhc-rg-1 rg ")
	})
	a.stop(t)
	// Restart halfway through the grace, so that a grace counted again
	// from the restart would end visibly later than the real one.
	time.Sleep(time.Until(deleted.Add(grace / 2)))
	b := h.start(t, "bhc-rg-b", opts)
	waitLeader(t, h, b, 30*time.Second)
	if err := h.createNode(ctx, "bhc-rg-3", "10.40.0.13"); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 15*time.Second, "bhc-rg-3 assigned", func() bool {
		n := h.obs.node("bhc-rg-3")
		return n != nil && n.Labels[LabelSite] == "rg"
	})
	h.obs.waitFor(t, 2*grace, "bhc-rg-3 allocated", func() bool { return allocated(h.obs.node("bhc-rg-3")) })
	took := time.Since(deleted)
	got := h.obs.node("bhc-rg-3").Spec.PodCIDRs[0]
	t.Logf("released block %s handed to the new node %s after the delete (grace %s, restart at %s)", got, took.Round(time.Millisecond), grace, grace/2)
	if took < grace {
		t.Errorf("the released block went to a new node %s after the delete, within the grace %s", took, grace)
	}
	if took > grace+3*time.Second {
		t.Errorf("the new node waited %s after the delete: the grace (%s) was counted again from the restart", took, grace)
	}
	if got != released {
		t.Errorf("new node got %s, want the released %s (the only block)", got, released)
	}
	checkNoDuplicates(t, h.cs)

	// A node deleted while no replica runs: no one records its grace, but
	// the published catalog lists it; the next leader starts its grace
	// when it rebuilds, and hands the block out no sooner.
	b.stop(t)
	gone := h.obs.node("bhc-rg-2").Spec.PodCIDRs[0]
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "bhc-rg-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c := h.start(t, "bhc-rg-c", opts)
	waitLeader(t, h, c, 30*time.Second)
	led := time.Now()
	if err := h.createNode(ctx, "bhc-rg-4", "10.40.0.14"); err != nil {
		t.Fatal(err)
	}
	h.obs.waitFor(t, 2*grace, "bhc-rg-4 allocated", func() bool { return allocated(h.obs.node("bhc-rg-4")) })
	took = time.Since(led)
	t.Logf("block %s of a node deleted while no replica ran handed out %s after the next leader led (grace %s)", gone, took.Round(time.Millisecond), grace)
	if took < grace-time.Second { // led is seen up to the 20 ms poll after the rebuild
		t.Errorf("the block of a node deleted unseen went to a new node %s after the leader started, within the grace %s", took, grace)
	}
	if got := h.obs.node("bhc-rg-4").Spec.PodCIDRs[0]; got != gone {
		t.Errorf("new node got %s, want %s", got, gone)
	}
	checkNoDuplicates(t, h.cs)
}

// TestKubeReleasesSharded: 12,000 nodes deleted within one grace, with
// AKS-length names and dual-stack blocks, are recorded in shards of at
// most maxReleasesShardBytes, under the deploy RBAC's token, against the
// real API server, which refuses the same lines as one ConfigMap (more
// than 1 MiB). A new leader restores every one of them; once most graces
// have ended the unused shards are deleted, and what is left restores.
func TestKubeReleasesSharded(t *testing.T) {
	h := startKube(t)
	h.env.ApplyFiles(t, deployRBAC...)
	sa := h.env.ServiceAccountConfig(t, testNS, controllerSA)
	sa.QPS, sa.Burst = 100, 200
	saCS, saDyn := kubernetes.NewForConfigOrDie(sa), dynamic.NewForConfigOrDie(sa)
	const n, grace = 12000, time.Hour
	base := time.Now().Truncate(time.Second)
	var now atomic.Int64
	now.Store(base.UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	site := ipam.Site{Name: "westeurope-1", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("fd00::/48")},
		BlockBits4: 24, BlockBits6: 64}
	newCtl := func() *Controller {
		c, err := New(Options{Client: saCS, Dynamic: saDyn, Logger: slog.New(slog.NewTextHandler(&tWriter{t: t}, nil)),
			Registry: prometheus.NewRegistry(), Namespace: testNS, ReleaseGrace: grace, Now: clock})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.alloc.SetSite(site); err != nil {
			t.Fatal(err)
		}
		return c
	}
	ctx := context.Background()
	a := newCtl()
	for i := range n {
		node := fmt.Sprintf("aks-nodepool1-31415926-vmss%06x", i)
		if _, err := a.alloc.Allocate(site.Name, node); err != nil {
			t.Fatal(err)
		}
		now.Store(base.Add(time.Duration(i) * 100 * time.Millisecond).UnixNano()) // deleted 0.1 s apart
		a.alloc.Release(node)
	}
	pending := encodeReleases(a.alloc.Pending())
	if len(pending) <= 1<<20 {
		t.Fatalf("%d bytes of releases: the test wants more than a ConfigMap holds", len(pending))
	}
	_, err := h.cs.CoreV1().ConfigMaps(testNS).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bca-one-configmap"},
		Data: map[string]string{releasesKey: pending}}, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) && !apierrors.IsRequestEntityTooLargeError(err) {
		t.Errorf("one ConfigMap of %d bytes: %v, want it refused", len(pending), err)
	}
	shards := func() map[string]int {
		list, err := h.cs.CoreV1().ConfigMaps(testNS).List(ctx, metav1.ListOptions{LabelSelector: ReleasesLabel})
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]int{}
		for _, cm := range list.Items {
			out[cm.Name] = len(cm.Data[releasesKey])
			if out[cm.Name] > maxReleasesShardBytes {
				t.Errorf("shard %s: %d bytes, more than %d", cm.Name, out[cm.Name], maxReleasesShardBytes)
			}
		}
		return out
	}
	start := time.Now()
	if err := a.reconcileReleases(ctx, releaseQKey); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d releases, %d bytes, written in %s as shards %v", n, len(pending), time.Since(start).Round(time.Millisecond), shards())
	b := newCtl()
	if err := b.restoreReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if got := encodeReleases(b.alloc.Pending()); got != pending {
		t.Errorf("the new leader restored %d releases, want %d", len(b.alloc.Pending()), n)
	}

	// All but the last 1,000 graces end: one shard is left.
	now.Store(base.Add(grace + (n-1000)*100*time.Millisecond - time.Millisecond).UnixNano())
	if err := b.reconcileReleases(ctx, releaseQKey); err != nil {
		t.Fatal(err)
	}
	if got := shards(); len(got) != 1 || got[ReleasesName] == 0 {
		t.Errorf("shards %v, want %s alone", got, ReleasesName)
	}
	c := newCtl()
	if err := c.restoreReleases(ctx); err != nil {
		t.Fatal(err)
	}
	if got := len(c.alloc.Pending()); got != 1000 {
		t.Errorf("restored %d releases, want 1000", got)
	}
}

// TestKubeReleaseWritesCoalesced: 40 nodes deleted one every 50 ms make
// writes of the release shard no closer than the catalog interval (1 s),
// not one per delete, and the last write records every one of them. The
// writes are dated when a watch sees them; the watch's delivery may shift
// a date by some milliseconds, so the check allows 250 ms.
func TestKubeReleaseWritesCoalesced(t *testing.T) {
	h := startKube(t)
	const n = 40
	h.createSite(t, "rw", []string{"10.50.0.0/24"}, []string{"10.150.0.0/16"}, 24, 64)
	h.createGateway(t, "rw", "gw1", "10.50.0.1", "192.0.2.50:51820")
	in := h.start(t, "bhc-rw", func(o *Options) { o.ReleaseGrace = time.Hour })
	waitLeader(t, h, in, 30*time.Second)
	ctx := context.Background()
	for i := range n {
		if err := h.createNode(ctx, fmt.Sprintf("bhc-rw-%02d", i), fmt.Sprintf("10.50.0.%d", 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	h.obs.waitFor(t, 30*time.Second, "every node allocated", func() bool {
		for i := range n {
			if !allocated(h.obs.node(fmt.Sprintf("bhc-rw-%02d", i))) {
				return false
			}
		}
		return true
	})
	w, err := h.cs.CoreV1().ConfigMaps(testNS).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + ReleasesName})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	type write struct {
		at    time.Time
		lines int
	}
	writes := make(chan write, 100)
	go func() {
		for ev := range w.ResultChan() {
			if cm, ok := ev.Object.(*corev1.ConfigMap); ok {
				writes <- write{time.Now(), strings.Count(cm.Data[releasesKey], "\n")}
			}
		}
	}()
	start := time.Now()
	for i := range n {
		if err := h.cs.CoreV1().Nodes().Delete(ctx, fmt.Sprintf("bhc-rw-%02d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	var seen []write
	deadline := time.After(30 * time.Second)
	for len(seen) == 0 || seen[len(seen)-1].lines < n {
		select {
		case wr := <-writes:
			seen = append(seen, wr)
		case <-deadline:
			t.Fatalf("writes %v: the shard never held all %d releases", seen, n)
		}
	}
	for i := 1; i < len(seen); i++ {
		if gap := seen[i].at.Sub(seen[i-1].at); gap < time.Second-250*time.Millisecond {
			t.Errorf("writes %d and %d of %s %s apart (%d and %d lines), want no closer than 1 s", i-1, i, ReleasesName, gap, seen[i-1].lines, seen[i].lines)
		}
	}
	t.Logf("%d deletes over %s made %d writes of %s", n, time.Since(start).Round(time.Millisecond), len(seen), ReleasesName)
}
