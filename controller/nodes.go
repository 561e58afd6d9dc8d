package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/pager"

	"github.com/bridgehead/bridgehead/controller/ipam"
)

// rebuild lists every Node from the API server (paged, a consistent
// read) and rebuilds the allocator from the blocks they record, oldest
// Node first. It returns the node names listed.
//
// published are the nodes of the catalog published before this lead
// (publishedNodes): those no Node matches start their release grace.
func (c *Controller) rebuild(ctx context.Context, published []ipam.Released) ([]string, error) {
	start := time.Now()
	nodes, err := listNodes(ctx, c.client)
	if err != nil {
		return nil, err
	}
	sort.Slice(nodes, func(i, j int) bool {
		ti, tj := nodes[i].CreationTimestamp, nodes[j].CreationTimestamp
		if !ti.Equal(&tj) {
			return ti.Before(&tj)
		}
		return nodes[i].Name < nodes[j].Name
	})
	m := c.matcher.Load()
	var entries []ipam.Entry
	names := make([]string, 0, len(nodes))
	for _, n := range nodes {
		names = append(names, n.Name)
		cidrs, _ := recorded(n)
		if len(cidrs) == 0 {
			continue
		}
		// The site that recorded the blocks: the label, else the match.
		s := n.Labels[LabelSite]
		if s == "" {
			if ms := m.match(internalIPs(n)); len(ms) == 1 {
				s = ms[0]
			}
		}
		if s == "" {
			continue
		}
		entries = append(entries, ipam.Entry{Node: n.Name, Site: s, CIDRs: cidrs, Live: n.Annotations[AnnotationPodCIDRs] != ""})
	}
	probs := c.alloc.Rebuild(entries)
	if err := c.restoreReleases(ctx); err != nil {
		return nil, err
	}
	exists := make(map[string]bool, len(names))
	for _, n := range names {
		exists[n] = true
	}
	c.releaseUnrecorded(published, exists)
	held := len(c.alloc.Holdings())
	took := time.Since(start)
	c.metrics.rebuildNodes.Set(float64(len(nodes)))
	c.metrics.rebuildSecs.Set(took.Seconds())
	c.log.Info("allocation state rebuilt from Nodes", "nodes", len(nodes), "holding", held, "not_adopted", len(probs), "took", took.Round(time.Millisecond))
	return names, nil
}

// listNodes lists every Node (paged by 500, a consistent read), each as
// transformNode keeps it: rebuild holds them all until it ends, and
// whole kubelet Nodes held 191 MiB there at 10,000 Nodes, most of it
// images, conditions and managedFields that rebuild never reads
// (BenchmarkNodeSyncProtobuf/rebuildList measures what is held).
func listNodes(ctx context.Context, client kubernetes.Interface) ([]*corev1.Node, error) {
	var nodes []*corev1.Node
	p := pager.New(func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		return client.CoreV1().Nodes().List(ctx, opts)
	})
	p.PageSize = 500
	err := p.EachListItemWithAlloc(ctx, metav1.ListOptions{}, func(obj runtime.Object) error {
		if t, _ := transformNode(obj); t != nil {
			if n, ok := t.(*corev1.Node); ok {
				nodes = append(nodes, n)
			}
		}
		return nil
	})
	return nodes, err
}

// recorded returns the blocks a Node records: the annotation, else
// spec.podCIDRs (else spec.podCIDR).
func recorded(n *corev1.Node) ([]netip.Prefix, error) {
	var raw []string
	switch {
	case n.Annotations[AnnotationPodCIDRs] != "":
		raw = strings.Split(n.Annotations[AnnotationPodCIDRs], ",")
	case len(n.Spec.PodCIDRs) > 0:
		raw = n.Spec.PodCIDRs
	case n.Spec.PodCIDR != "":
		raw = []string{n.Spec.PodCIDR}
	}
	var out []netip.Prefix
	var errs []error
	for _, r := range raw {
		p, err := netip.ParsePrefix(strings.TrimSpace(r))
		if err != nil {
			errs = append(errs, fmt.Errorf("%q is not a CIDR", r))
			continue
		}
		out = append(out, p)
	}
	return out, errors.Join(errs...)
}

func internalIPs(n *corev1.Node) []netip.Addr {
	var out []netip.Addr
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		if ip, err := netip.ParseAddr(a.Address); err == nil {
			out = append(out, ip.Unmap())
		}
	}
	return out
}

// reconcileNode makes one Node match: see the package doc. Its writes
// carry the resourceVersion they were decided on; when the Node changed
// since (a conflict), it is read again from the API server and decided
// again.
func (c *Controller) reconcileNode(ctx context.Context, name string) error {
	// A Site event the site worker has not handled yet is applied first,
	// so a node is never matched against Sites older than the cache it
	// came from: a Site seen deleted takes no node, whichever worker runs
	// first (the site worker's syncSites then finds nothing dirty).
	if c.sitesDirty.Swap(false) {
		c.syncSites()
	}
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		c.forgetNode(name)
		return nil
	}
	if err != nil {
		return err
	}
	err = c.syncNode(ctx, n)
	if !apierrors.IsConflict(err) {
		return err
	}
	c.metrics.conflicts.WithLabelValues("node").Inc()
	fresh, err := c.client.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.forgetNode(name)
		return nil
	}
	if err != nil {
		return err
	}
	return c.syncNode(ctx, fresh)
}

// annotated returns the blocks of the node's annotation: the range its
// pods use, which the controller never changes once written.
func annotated(n *corev1.Node) []netip.Prefix {
	if n.Annotations[AnnotationPodCIDRs] == "" {
		return nil
	}
	p, _ := recorded(n)
	return p
}

func (c *Controller) syncNode(ctx context.Context, n *corev1.Node) error {
	name := n.Name
	ips := internalIPs(n)
	matches := c.matcher.Load().match(ips)
	_, heldSite, holds := c.alloc.Lookup(name)
	switch {
	case holds && (len(matches) != 1 || matches[0] != heldSite):
		// The node holds blocks of one site and its address now points
		// elsewhere: its spec.podCIDRs cannot change, so it stays where it
		// is, and the operator hears about it.
		c.report(n, "SiteChanged", fmt.Sprintf("InternalIPs %v now match sites %v; the node keeps its blocks in site %s", ips, matches, heldSite))
		matches = []string{heldSite}
	case len(matches) == 0:
		return c.unassign(ctx, n, "no_site", "NoSite", fmt.Sprintf("InternalIPs %v are in no valid Site's nodeCIDRs", ips))
	case len(matches) > 1:
		return c.unassign(ctx, n, "ambiguous", "AmbiguousSite", fmt.Sprintf("InternalIPs %v are in the nodeCIDRs of sites %s", ips, strings.Join(matches, ", ")))
	}
	siteName := matches[0]

	live := annotated(n)
	blocks, holds := c.heldBlocks(name)
	if holds && len(live) > 0 && !sameCIDRs(blocks.List(), live) {
		// The Node records another range than this replica holds for it:
		// another writer (a leader before this one) landed it. The Node is
		// the record and its pods use that range: ours was never written
		// to it, so it goes back to the pool now, and the Node's is adopted.
		c.log.Warn("node records another range than this leader holds for it; adopting the node's", "node", name, "recorded", live, "held", blocks.List())
		c.alloc.Forget(name)
		holds = false
	}
	var stuck []ipam.Problem // the live range not adopted
	if !holds {
		rec, perr := recorded(n)
		if perr != nil {
			c.report(n, "PodCIDRUnreadable", perr.Error())
		}
		if len(rec) > 0 {
			adopt := c.alloc.Adopt
			if len(live) > 0 {
				adopt = c.alloc.AdoptLive
			}
			b, probs, err := adopt(siteName, name, rec)
			if err != nil {
				return err
			}
			for _, p := range probs {
				c.metrics.problems.WithLabelValues(string(p.Reason)).Inc()
				if len(live) > 0 && p.Reason != ipam.SecondOfFamily {
					stuck = append(stuck, p)
					continue
				}
				c.report(n, "PodCIDR"+string(p.Reason), p.String())
			}
			if len(b.List()) > 0 {
				c.metrics.allocations.WithLabelValues("adopted").Inc()
			}
		}
	}
	if reason, msg := c.liveRangeProblem(name, siteName, stuck); reason != "" {
		// Never a new range for a live node: say what to do instead.
		c.report(n, reason, msg)
		c.setAssigned(name, siteName, false)
		if err := c.patchNode(ctx, n, siteName, ipam.Blocks{}); err != nil {
			return err
		}
		return c.setNodeCondition(ctx, n, corev1.ConditionFalse, reason, msg)
	}
	blocks, _ = c.heldBlocks(name)
	before := blocks
	blocks, err := c.alloc.Allocate(siteName, name)
	switch {
	case errors.Is(err, ipam.ErrExhausted):
		c.metrics.allocations.WithLabelValues("exhausted").Inc()
		c.report(n, "PoolExhausted", err.Error())
		c.setAssigned(name, siteName, true)
		return c.patchNode(ctx, n, siteName, ipam.Blocks{})
	case err != nil:
		return err
	}
	if len(blocks.List()) > len(before.List()) {
		c.metrics.allocations.WithLabelValues("allocated").Inc()
	}
	c.setAssigned(name, siteName, false)
	if err := c.patchNode(ctx, n, siteName, blocks); err != nil {
		return err
	}
	return c.setNodeCondition(ctx, n, corev1.ConditionTrue, "Assigned", "site "+siteName)
}

// liveRangeProblem says why a node's live range (its annotation) cannot
// stay as it is in its site: not adopted (stuck: held by another node,
// not a block of the pool) or held outside the pool. The message says
// what to do; "" when nothing is wrong.
func (c *Controller) liveRangeProblem(node, siteName string, stuck []ipam.Problem) (reason, msg string) {
	remedy := fmt.Sprintf("drain and delete the Node (kubectl drain %s; kubectl delete node %s) so that it rejoins with a new range", node, node)
	for _, p := range stuck {
		if p.Reason == ipam.Conflict {
			return "PodRangeConflict", fmt.Sprintf("pod range %s (%s) is also held by node %s, so two nodes' pods may share addresses; the controller never changes a live node's range: %s, or that other node", p.CIDR, AnnotationPodCIDRs, p.Other, remedy)
		}
	}
	var out []string
	for _, p := range stuck {
		out = append(out, fmt.Sprintf("%s (%s)", p.CIDR, p.Reason))
	}
	for _, p := range c.alloc.OutOfPool(node) {
		out = append(out, p.String())
	}
	if len(out) == 0 {
		return "", ""
	}
	return "PodRangeOutsidePool", fmt.Sprintf("pod range %s (%s) is not a block of site %s's pod CIDRs; the controller never changes a live node's range: add a pod CIDR containing it to Site %s (with the same block size), or %s",
		strings.Join(out, ", "), AnnotationPodCIDRs, siteName, siteName, remedy)
}

func sameCIDRs(a, b []netip.Prefix) bool {
	if len(a) != len(b) {
		return false
	}
	for _, p := range a {
		found := false
		for _, q := range b {
			found = found || p == q
		}
		if !found {
			return false
		}
	}
	return true
}

func (c *Controller) heldBlocks(name string) (ipam.Blocks, bool) {
	b, _, ok := c.alloc.Lookup(name)
	return b, ok
}

// patchNode writes the site label, the annotation and, when empty,
// spec.podCIDR(s), in one merge patch, when any differs. The patch carries
// n's resourceVersion: the API server refuses it (a conflict) when the
// Node changed since n was read, so a decision made on an old copy (an
// old leader's, paused) never lands. The annotation, once written, only
// gains a family: patchNode refuses to change or drop a block of it.
func (c *Controller) patchNode(ctx context.Context, n *corev1.Node, siteName string, b ipam.Blocks) error {
	meta := map[string]any{"resourceVersion": n.ResourceVersion}
	spec := map[string]any{}
	if n.Labels[LabelSite] != siteName {
		meta["labels"] = map[string]string{LabelSite: siteName}
	}
	list := b.List()
	strs := make([]string, len(list))
	for i, p := range list {
		strs[i] = p.String()
	}
	if ann := strings.Join(strs, ","); len(list) > 0 && n.Annotations[AnnotationPodCIDRs] != ann {
		for _, p := range annotated(n) {
			if !sameCIDRs([]netip.Prefix{p}, []netip.Prefix{b.V4}) && !sameCIDRs([]netip.Prefix{p}, []netip.Prefix{b.V6}) {
				return fmt.Errorf("node %s: refusing to change its pod range %q to %q", n.Name, n.Annotations[AnnotationPodCIDRs], ann)
			}
		}
		meta["annotations"] = map[string]string{AnnotationPodCIDRs: ann}
	}
	if len(list) > 0 && len(n.Spec.PodCIDRs) == 0 && n.Spec.PodCIDR == "" {
		spec["podCIDR"] = strs[0]
		spec["podCIDRs"] = strs
	}
	if len(meta) == 1 && len(spec) == 0 {
		return nil
	}
	patch := map[string]any{}
	if len(meta) > 0 {
		patch["metadata"] = meta
	}
	if len(spec) > 0 {
		patch["spec"] = spec
	}
	data, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: component})
	c.countWrite("node", err)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("patch node %s: %w", n.Name, err)
	}
	if len(spec) > 0 || meta["labels"] != nil {
		c.siteQueue.AddAfter(siteName, c.opts.StatusInterval)
	}
	return nil
}

// unassign records a node with no site: Event, condition, metric.
func (c *Controller) unassign(ctx context.Context, n *corev1.Node, metricReason, reason, msg string) error {
	c.report(n, reason, msg)
	c.mu.Lock()
	if s, ok := c.assigned[n.Name]; ok {
		c.siteCount[s]--
		delete(c.assigned, n.Name)
		c.siteQueue.AddAfter(s, c.opts.StatusInterval)
	}
	c.removeWaitingLocked(n.Name)
	c.unassigned[n.Name] = metricReason
	c.updateUnassignedLocked()
	c.mu.Unlock()
	return c.setNodeCondition(ctx, n, corev1.ConditionFalse, reason, msg)
}

// setAssigned records a node's site; waiting means it has no block yet.
func (c *Controller) setAssigned(node, siteName string, waiting bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.assigned[node]; !ok || old != siteName {
		if ok {
			c.siteCount[old]--
			c.siteQueue.AddAfter(old, c.opts.StatusInterval)
		}
		c.assigned[node] = siteName
		c.siteCount[siteName]++
		c.siteQueue.AddAfter(siteName, c.opts.StatusInterval)
	}
	if _, ok := c.unassigned[node]; ok {
		delete(c.unassigned, node)
		c.updateUnassignedLocked()
	}
	wasWaiting := c.waiting[siteName][node]
	c.removeWaitingLocked(node)
	if waiting {
		if c.waiting[siteName] == nil {
			c.waiting[siteName] = map[string]bool{}
		}
		c.waiting[siteName][node] = true
	}
	if wasWaiting != waiting {
		c.siteQueue.AddAfter(siteName, c.opts.StatusInterval)
	}
}

// forgetNode handles a deleted Node: its blocks start their grace.
func (c *Controller) forgetNode(name string) {
	_, siteName, holds := c.alloc.Lookup(name)
	c.alloc.Release(name)
	c.mu.Lock()
	if s, ok := c.assigned[name]; ok {
		c.siteCount[s]--
		delete(c.assigned, name)
		if siteName == "" {
			siteName = s
		}
	}
	c.removeWaitingLocked(name)
	if _, ok := c.unassigned[name]; ok {
		delete(c.unassigned, name)
		c.updateUnassignedLocked()
	}
	delete(c.reported, "node/"+name)
	c.mu.Unlock()
	if siteName != "" {
		c.siteQueue.AddAfter(siteName, c.opts.StatusInterval)
	}
	if holds {
		c.enqueueReleases()
		// The site's reconcile sees the pending blocks and comes back when
		// their grace ends.
		c.log.Info("node deleted, blocks in their release grace", "node", name, "site", siteName, "grace", c.opts.ReleaseGrace)
	}
}

func (c *Controller) removeWaitingLocked(node string) {
	for s, ns := range c.waiting {
		if ns[node] {
			delete(ns, node)
			if len(ns) == 0 {
				delete(c.waiting, s)
			}
		}
	}
}

func (c *Controller) updateUnassignedLocked() {
	counts := map[string]int{"no_site": 0, "ambiguous": 0}
	for _, r := range c.unassigned {
		counts[r]++
	}
	for r, n := range counts {
		c.metrics.unassigned.WithLabelValues(r).Set(float64(n))
	}
}

// report emits a Warning Event about a node once per distinct problem.
func (c *Controller) report(n *corev1.Node, reason, msg string) {
	key := "node/" + n.Name
	c.mu.Lock()
	seen := c.reported[key] == reason+": "+msg
	c.reported[key] = reason + ": " + msg
	c.mu.Unlock()
	if seen {
		return
	}
	c.log.Warn("node problem", "node", n.Name, "reason", reason, "msg", msg)
	c.recorder.Eventf(n, nil, corev1.EventTypeWarning, reason, "Assign", "%s", msg)
}

// setNodeCondition writes the BridgeheadSite condition when it differs.
// A node that never had a problem gets no condition (one write fewer per
// join); True is written only to clear a False.
func (c *Controller) setNodeCondition(ctx context.Context, n *corev1.Node, status corev1.ConditionStatus, reason, msg string) error {
	cur := siteCondition(n)
	if status == corev1.ConditionTrue && cur.Type == "" {
		return nil
	}
	if cur.Status == status && cur.Reason == reason && cur.Message == msg {
		return nil
	}
	now := metav1.Now()
	cond := corev1.NodeCondition{Type: NodeConditionSite, Status: status, Reason: reason, Message: msg, LastHeartbeatTime: now, LastTransitionTime: now}
	if cur.Status == status {
		for _, old := range n.Status.Conditions {
			if old.Type == NodeConditionSite {
				cond.LastTransitionTime = old.LastTransitionTime
			}
		}
	}
	data, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.NodeCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = c.client.CoreV1().Nodes().PatchStatus(ctx, n.Name, data)
	c.countWrite("node_status", err)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
