package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bridgehead/bridgehead/controller/ipam"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// syncSites re-reads every Site from the cache: it parses them, keeps the
// last good model of a Site whose spec does not parse, finds overlaps
// between sites, gives the allocator the pools, and swaps in a new
// matcher. Nodes are re-queued when the node CIDRs changed, and nodes the
// allocator evicted (their blocks left the pool) always.
func (c *Controller) syncSites() {
	objs, err := c.sites.List(everything())
	if err != nil {
		c.log.Error("list sites from cache", "err", err)
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	present := map[string]bool{}
	deleting := map[string]string{}
	problems := map[string]string{}
	candidates := map[string]site{}
	for _, o := range objs {
		s, err := toSite(o)
		if err != nil {
			c.log.Error("decode site", "err", err)
			continue
		}
		present[s.Name] = true
		if s.DeletionTimestamp != nil {
			deleting[s.Name] = "being deleted"
		}
		m, err := parseSite(s)
		if err != nil {
			problems[s.Name] = err.Error()
			if last, ok := c.siteModels[s.Name]; ok {
				candidates[s.Name] = last
			}
			continue
		}
		candidates[s.Name] = m
	}
	var requeue []string
	matchChanged := false
	for name := range c.siteModels {
		if !present[name] {
			requeue = append(requeue, c.alloc.RemoveSite(name)...)
			delete(c.siteModels, name)
			c.metrics.siteNodes.DeleteLabelValues(name)
			for _, fam := range []string{"ipv4", "ipv6"} {
				for _, state := range []string{"held", "pending", "free"} {
					c.metrics.siteBlocks.DeleteLabelValues(name, fam, state)
				}
			}
			matchChanged = true
		}
	}
	overlaps := overlapProblems(candidates)
	names := make([]string, 0, len(candidates))
	for n := range candidates {
		names = append(names, n)
	}
	sort.Strings(names)
	models := map[string]site{}
	for _, name := range names {
		m := candidates[name]
		evicted, err := c.alloc.SetSite(m.pool)
		if err != nil {
			if problems[name] == "" {
				problems[name] = err.Error()
			}
			if last, ok := c.siteModels[name]; ok {
				models[name] = last
			}
			continue
		}
		requeue = append(requeue, evicted...)
		if old, ok := c.siteModels[name]; !ok || !old.sameNodeCIDRs(m) {
			matchChanged = true
		}
		models[name] = m
	}
	for name, msg := range overlaps {
		if problems[name] == "" {
			problems[name] = msg
		}
	}
	if len(overlaps) > 0 {
		matchChanged = true // exclusions may have changed; cheap to redo
	}
	c.siteModels = models
	c.siteProblems = problems
	// A Site being deleted takes no new node; its nodes keep their blocks.
	exclude := maps.Clone(overlaps)
	maps.Copy(exclude, deleting)
	c.matcher.Store(newMatcher(models, exclude))
	if !c.leading.Load() {
		return
	}
	if matchChanged {
		if all, err := c.nodes.List(everything()); err == nil {
			for _, n := range all {
				c.nodeQueue.Add(n.Name)
			}
		}
	}
	for _, n := range requeue {
		c.nodeQueue.Add(n)
	}
}

// reconcileSite writes a Site's status when it differs from what the
// controller knows.
func (c *Controller) reconcileSite(ctx context.Context, name string) error {
	if c.sitesDirty.Swap(false) {
		c.syncSites()
	}
	obj, err := c.sites.Get(name)
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	s, err := toSite(obj)
	if err != nil {
		return err
	}
	err = c.syncSite(ctx, s)
	if !apierrors.IsConflict(err) {
		return err
	}
	// The cache lagged behind a write (often the controller's own
	// previous status update): read the Site again and decide again.
	c.metrics.conflicts.WithLabelValues("site").Inc()
	fresh, err := c.dyn.Resource(SitesGVR).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if s, err = toSite(fresh); err != nil {
		return err
	}
	return c.syncSite(ctx, s)
}

// syncSite guards a Site's deletion and writes its status; every write
// carries s's resourceVersion.
func (c *Controller) syncSite(ctx context.Context, s *v1alpha1.Site) error {
	name := s.Name
	if done, err := c.guardDeletion(ctx, s); done || err != nil {
		return err
	}
	st := c.alloc.Stats(name)
	c.mu.Lock()
	problem := c.siteProblems[name]
	if problem == "" {
		problem = c.catalogProblems[name] // left out of the catalog
	}
	nodes := c.siteCount[name]
	var waiting []string
	for n := range c.waiting[name] {
		waiting = append(waiting, n)
	}
	c.mu.Unlock()
	gws, gwsReady := c.gatewayCounts(name)

	status := *s.Status.DeepCopy()
	status.ObservedGeneration = s.Generation
	status.Nodes = int32(nodes)
	status.AllocatedBlocks = int32(st.V4.Held + st.V6.Held)
	status.FreeBlocks = int64(st.V4.Free)
	status.FreeBlocks6 = int64(st.V6.Free)
	status.Gateways, status.GatewaysReady = gws, gwsReady
	valid := metav1.Condition{Type: v1alpha1.ConditionValid, Status: metav1.ConditionTrue, Reason: "Valid",
		Message: "the spec parses, overlaps no other Site and passes the catalog checks", ObservedGeneration: s.Generation}
	if problem != "" {
		valid.Status, valid.Reason, valid.Message = metav1.ConditionFalse, "Invalid", problem
	}
	exhausted := metav1.Condition{Type: v1alpha1.ConditionPoolExhausted, Status: metav1.ConditionFalse, Reason: "BlocksFree",
		Message: fmt.Sprintf("free blocks: IPv4 %d, IPv6 %d", st.V4.Free, st.V6.Free), ObservedGeneration: s.Generation}
	if len(waiting) > 0 {
		sort.Strings(waiting)
		exhausted.Status, exhausted.Reason = metav1.ConditionTrue, "NodesWaiting"
		exhausted.Message = fmt.Sprintf("%d nodes wait for a pod block (first: %s); free blocks: IPv4 %d of %d, IPv6 %d of %d",
			len(waiting), waiting[0], st.V4.Free, st.V4.Blocks, st.V6.Free, st.V6.Blocks)
	}
	var wasValid *metav1.Condition // a copy: SetStatusCondition changes the slice in place
	if c := meta.FindStatusCondition(status.Conditions, v1alpha1.ConditionValid); c != nil {
		cp := *c
		wasValid = &cp
	}
	wasExhausted := meta.IsStatusConditionTrue(status.Conditions, v1alpha1.ConditionPoolExhausted)
	meta.SetStatusCondition(&status.Conditions, valid)
	meta.SetStatusCondition(&status.Conditions, exhausted)

	ref := siteRef(s)
	if problem != "" && (wasValid == nil || wasValid.Status != metav1.ConditionFalse || wasValid.Message != problem) {
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "Invalid", "Validate", "%s", problem)
	}
	if len(waiting) > 0 && !wasExhausted {
		c.recorder.Eventf(ref, nil, corev1.EventTypeWarning, "PoolExhausted", "Allocate", "%s", exhausted.Message)
	}
	c.setSiteMetrics(name, nodes, st)

	// Blocks in their grace: come back when the next grace ends (a
	// separate AddAfter, such as a node's one-second refresh, would
	// coalesce this one away, so every reconcile schedules it again).
	if st.V4.Pending+st.V6.Pending > 0 {
		if at, ok := c.alloc.NextRelease(); ok {
			c.siteQueue.AddAfter(name, max(at.Sub(c.now()), 0)+10*time.Millisecond)
		}
	}
	// Blocks came back (a release grace ended): the waiting nodes try again.
	if len(waiting) > 0 && (st.V4.Free > 0 || st.V6.Free > 0) {
		for _, n := range waiting {
			c.nodeQueue.Add(n)
		}
	}
	if equality.Semantic.DeepEqual(status, s.Status) {
		return nil
	}
	s.Status = status
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(s)
	if err != nil {
		return err
	}
	_, err = c.dyn.Resource(SitesGVR).UpdateStatus(ctx, &unstructured.Unstructured{Object: u}, metav1.UpdateOptions{FieldManager: component})
	c.countWrite("site_status", err)
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// FinalizerPodBlocks keeps a Site while Nodes hold blocks of it: deleting
// it would free their pod ranges for other sites while their pods use
// them.
const FinalizerPodBlocks = v1alpha1.GroupName + "/pod-blocks"

// guardDeletion adds the finalizer to a Site, and removes it from a Site
// being deleted once no Node holds a block of it (done: the Site needs no
// status then). Its writes carry the resourceVersion read, and a write
// that lands moves s to the version it made.
func (c *Controller) guardDeletion(ctx context.Context, s *v1alpha1.Site) (done bool, err error) {
	has := slices.Contains(s.Finalizers, FinalizerPodBlocks)
	var fins []string
	switch {
	case s.DeletionTimestamp == nil && !has:
		fins = append(slices.Clone(s.Finalizers), FinalizerPodBlocks)
	case s.DeletionTimestamp != nil && has:
		if holders := c.siteHolders(s.Name); len(holders) > 0 {
			c.log.Info("site deletion waits for its nodes", "site", s.Name, "nodes", len(holders), "first", holders[0])
			return false, nil
		}
		fins = slices.DeleteFunc(slices.Clone(s.Finalizers), func(f string) bool { return f == FinalizerPodBlocks })
		done = true
	default:
		return s.DeletionTimestamp != nil, nil
	}
	if fins == nil {
		fins = []string{}
	}
	data, err := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": fins, "resourceVersion": s.ResourceVersion}})
	if err != nil {
		return done, err
	}
	out, err := c.dyn.Resource(SitesGVR).Patch(ctx, s.Name, types.MergePatchType, data, metav1.PatchOptions{FieldManager: component})
	c.countWrite("site", err)
	if err == nil {
		// The status write that follows carries this version: the
		// Site read before the patch would conflict with it.
		s.ResourceVersion, s.Finalizers = out.GetResourceVersion(), fins
	}
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case apierrors.IsForbidden(err):
		// The credential may not patch Sites (an older ClusterRole): the
		// Site goes unguarded, said once; the rest of the work goes on.
		if !c.finalizerDenied.Swap(true) {
			c.log.Warn("cannot add or remove the Site finalizer (needs patch on sites); Site deletion is not guarded", "site", s.Name, "err", err)
		}
		return done, nil
	case err != nil:
		return done, fmt.Errorf("site %s finalizers: %w", s.Name, err)
	}
	if done {
		c.log.Info("site finalizer removed: no node holds a block of it", "site", s.Name)
	}
	return done, nil
}

// siteHolders returns the nodes holding blocks of a site: in the
// allocator, or labelled with it and recording blocks in the cache.
func (c *Controller) siteHolders(name string) []string {
	var out []string
	for _, e := range c.alloc.Holdings() {
		if e.Site == name {
			out = append(out, e.Node)
		}
	}
	if nodes, err := c.nodes.List(everything()); err == nil {
		for _, n := range nodes {
			if rec, _ := recorded(n); n.Labels[LabelSite] == name && len(rec) > 0 && !slices.Contains(out, n.Name) {
				out = append(out, n.Name)
			}
		}
	}
	sort.Strings(out)
	return out
}

func (c *Controller) gatewayCounts(siteName string) (total, ready int32) {
	objs, err := c.gws.List(everything())
	if err != nil {
		return 0, 0
	}
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		if s, _, _ := unstructured.NestedString(u.Object, "spec", "site"); s != siteName {
			continue
		}
		total++
		var gw v1alpha1.Gateway
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &gw) == nil &&
			meta.IsStatusConditionTrue(gw.Status.Conditions, v1alpha1.ConditionReady) {
			ready++
		}
	}
	return total, ready
}

func (c *Controller) setSiteMetrics(name string, nodes int, st ipam.Stats) {
	c.metrics.siteNodes.WithLabelValues(name).Set(float64(nodes))
	for fam, fs := range map[string]ipam.FamilyStats{"ipv4": st.V4, "ipv6": st.V6} {
		c.metrics.siteBlocks.WithLabelValues(name, fam, "held").Set(float64(fs.Held))
		c.metrics.siteBlocks.WithLabelValues(name, fam, "pending").Set(float64(fs.Pending))
		c.metrics.siteBlocks.WithLabelValues(name, fam, "free").Set(float64(fs.Free))
	}
}

func toSite(obj runtime.Object) (*v1alpha1.Site, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, fmt.Errorf("site: unexpected %T", obj)
	}
	var s v1alpha1.Site
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &s); err != nil {
		return nil, fmt.Errorf("site %s: %w", u.GetName(), err)
	}
	return &s, nil
}

func siteRef(s *v1alpha1.Site) *corev1.ObjectReference {
	return &corev1.ObjectReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Site", Name: s.Name, UID: s.UID, ResourceVersion: s.ResourceVersion}
}

func (c *Controller) countWrite(object string, err error) {
	r := "ok"
	if err != nil {
		r = "error"
	}
	c.metrics.writes.WithLabelValues(object, r).Inc()
}
