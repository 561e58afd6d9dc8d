package controller

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// catalogKey is the one key of the catalog queue: a publication covers
// the whole catalog.
const catalogKey = "catalog"

// enqueueCatalog schedules a publication: at once when the last one ended
// at least CatalogInterval ago, else when that interval is over. The
// queue keeps one pending key at its earliest time, so a burst of
// changes makes one publication.
func (c *Controller) enqueueCatalog() {
	if !c.leading.Load() {
		return
	}
	c.catalogQueue.AddAfter(catalogKey, c.catalogWait())
}

// catalogWait is how long the next publication must wait.
func (c *Controller) catalogWait() time.Duration {
	return c.catalogPace.wait(c.opts.CatalogInterval, time.Now())
}

// reconcileCatalog renders the catalog from the caches and publishes the
// objects whose content changed: slices first (catalogWriters at a
// time), then the sites' indexes (each its site's commit point) once they
// are all written, then the base (the sites' commit point), then deletes
// the slices and indexes no longer listed. It runs
// on the catalog queue's one worker, at most once per CatalogInterval
// after a publication that wrote (counted from its end), so no object is
// written more often.
func (c *Controller) reconcileCatalog(ctx context.Context, _ string) error {
	if wait := c.catalogWait(); wait > 0 {
		c.catalogQueue.AddAfter(catalogKey, wait)
		return nil
	}
	// The interval counts from the end of a publication that wrote
	// (one that found nothing changed writes nothing, so need not delay
	// the next).
	var attempted atomic.Bool
	defer func() {
		if attempted.Load() {
			c.catalogPace.done(time.Now())
		}
	}()
	start := time.Now()
	p, err := c.currentPlan()
	if err != nil {
		c.metrics.catalogPublishes.WithLabelValues("invalid").Inc()
		c.log.Error("catalog not published: the plan fails its checks", "err", err)
		return nil // retried on the next change
	}
	// Each site keeps the slice count of the publication in force while
	// its size stays in the band, so a join rewrites one slice.
	prev := catalog.BucketCounts(c.catalogCurrent(catalog.BaseName), c.catalogCurrent)
	objs, err := catalog.Render(p.sites, catalog.Namespace(c.opts.Namespace), catalog.Relays(p.relays), catalog.PreviousBuckets(prev))
	if err != nil {
		c.metrics.catalogPublishes.WithLabelValues("invalid").Inc()
		c.log.Error("catalog not published", "err", err)
		return nil
	}
	c.metrics.catalogRender.Observe(time.Since(start).Seconds())
	c.applyPlanProblems(p)

	want := map[string]bool{}
	for _, o := range objs {
		want[o.Name] = true
	}
	// The slices, catalogWriters at a time, then the indexes once they
	// all are written, then the base: each object is written only after
	// everything it lists, so a reader never assembles a torn catalog.
	var written, bytes int
	slices, indexes, base := catalog.WriteOrder(objs)
	for _, group := range [][]*corev1.ConfigMap{slices, indexes, base} {
		var w, b int
		w, b, err = c.writeCatalogObjects(ctx, group, catalogWriters, &attempted)
		written, bytes = written+w, bytes+b
		if err != nil {
			break
		}
	}
	if err != nil {
		c.metrics.catalogPublishes.WithLabelValues("error").Inc()
		return err
	}
	deleted, err := c.deleteStaleSlices(ctx, want, &attempted)
	if err != nil {
		c.metrics.catalogPublishes.WithLabelValues("error").Inc()
		return err
	}
	c.metrics.catalogPublishes.WithLabelValues("ok").Inc()
	c.metrics.catalogBytes.WithLabelValues("base").Set(float64(catalog.Size(objs[0])))
	total := 0
	for _, o := range slices {
		total += catalog.Size(o)
	}
	c.metrics.catalogBytes.WithLabelValues("slices").Set(float64(total))
	total = 0
	for _, o := range indexes {
		total += catalog.Size(o)
	}
	c.metrics.catalogBytes.WithLabelValues("indexes").Set(float64(total))
	c.metrics.catalogObjects.Set(float64(len(objs)))
	c.metrics.catalogNodes.Set(float64(p.nodes))
	if written+deleted > 0 || !c.catalogPublished {
		c.setRoutePlan(p.sites)
		c.catalogPublished = true
		c.log.Info("catalog published", "sites", len(p.sites), "left_out", len(p.leftOut), "nodes", p.nodes,
			"nodes_left_out", len(p.nodeProblems), "gateways_unregistered", p.unregistered,
			"objects", len(objs), "written", written, "deleted", deleted, "bytes_written", bytes,
			"took", time.Since(start).Round(time.Millisecond))
	}
	return nil
}

// catalogWriters bounds the slice writes in flight: with 200 sites under
// churn every slice changes, and one at a time took 9 s a publication
// against a loaded API server (TestKubeCatalogScale).
const catalogWriters = 8

// writeCatalogObjects writes objs (see writeCatalogObject), at most
// parallel at a time, and returns how many it wrote, their bytes, and the
// first error.
func (c *Controller) writeCatalogObjects(ctx context.Context, objs []*corev1.ConfigMap, parallel int, attempted *atomic.Bool) (written, bytes int, err error) {
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		sem  = make(chan struct{}, parallel)
		errs []error
	)
	for _, o := range objs {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			wrote, err := c.writeCatalogObject(ctx, o, attempted)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, fmt.Errorf("publish %s: %w", o.Name, err))
			} else if wrote {
				written++
				bytes += catalog.Size(o)
			}
		})
	}
	wg.Wait()
	return written, bytes, errors.Join(errs...)
}

// currentPlan builds the plan from the informer caches.
func (c *Controller) currentPlan() (*plan, error) {
	siteObjs, err := c.sites.List(everything())
	if err != nil {
		return nil, err
	}
	var sites []*v1alpha1.Site
	for _, o := range siteObjs {
		if s, err := toSite(o); err == nil {
			sites = append(sites, s)
		}
	}
	gwObjs, err := c.gws.List(everything())
	if err != nil {
		return nil, err
	}
	var gws []*v1alpha1.Gateway
	for _, o := range gwObjs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		var g v1alpha1.Gateway
		if runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &g) == nil {
			gws = append(gws, &g)
		}
	}
	nodes, err := c.nodes.List(everything())
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	invalid := maps.Clone(c.siteProblems)
	c.mu.Unlock()
	return buildPlan(sites, gws, nodes, invalid)
}

// applyPlanProblems records the Sites the plan left out for their Valid
// condition (re-queueing those whose problem changed) and reports the
// Nodes it left out.
func (c *Controller) applyPlanProblems(p *plan) {
	c.mu.Lock()
	changed := map[string]bool{}
	for s, msg := range p.leftOut {
		if c.catalogProblems[s] != msg {
			changed[s] = true
		}
	}
	for s := range c.catalogProblems {
		if _, ok := p.leftOut[s]; !ok {
			changed[s] = true
		}
	}
	c.catalogProblems = p.leftOut
	c.mu.Unlock()
	for s := range changed {
		c.siteQueue.Add(s)
	}
	c.metrics.catalogLeftOut.WithLabelValues("site").Set(float64(len(p.leftOut)))
	c.metrics.catalogLeftOut.WithLabelValues("node").Set(float64(len(p.nodeProblems)))
	names := make([]string, 0, len(p.nodeProblems))
	for n := range p.nodeProblems {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		if n, err := c.nodes.Get(name); err == nil {
			c.report(n, "CatalogInvalid", "left out of the catalog: "+p.nodeProblems[name])
		}
	}
	for name, note := range p.nodeNotes {
		if n, err := c.nodes.Get(name); err == nil {
			c.report(n, "CatalogFamilyMissing", note)
		}
	}
}

// writeCatalogObject creates or updates o when its labels or data differ
// from the last version this leader wrote or, failing that, the cache's.
// It reports whether it wrote.
func (c *Controller) writeCatalogObject(ctx context.Context, o *corev1.ConfigMap, attempted *atomic.Bool) (bool, error) {
	cur := c.catalogCurrent(o.Name)
	if cur != nil && maps.Equal(cur.Data, o.Data) && maps.Equal(cur.Labels, o.Labels) {
		return false, nil
	}
	attempted.Store(true)
	cms := c.client.CoreV1().ConfigMaps(c.opts.Namespace)
	var got *corev1.ConfigMap
	var err error
	op := "create"
	if cur == nil {
		got, err = cms.Create(ctx, o, metav1.CreateOptions{FieldManager: component})
	} else {
		op = "update"
		up := cur.DeepCopy()
		up.Labels, up.Data = o.Labels, o.Data
		got, err = cms.Update(ctx, up, metav1.UpdateOptions{FieldManager: component})
	}
	c.countWrite("configmap", err)
	if err != nil {
		// A conflict or an object that exists: the cache lags. Forget
		// what we wrote and retry from the cache.
		c.catalogMu.Lock()
		delete(c.catalogWritten, o.Name)
		c.catalogMu.Unlock()
		return false, err
	}
	c.catalogMu.Lock()
	c.catalogWritten[o.Name] = got
	c.catalogMu.Unlock()
	c.metrics.catalogWrites.WithLabelValues(op).Inc()
	c.metrics.catalogBytesWritten.Add(float64(catalog.Size(o)))
	return true, nil
}

// catalogCurrent is the object as this leader last wrote it, else as the
// cache has it, else nil.
func (c *Controller) catalogCurrent(name string) *corev1.ConfigMap {
	c.catalogMu.Lock()
	w := c.catalogWritten[name]
	c.catalogMu.Unlock()
	if w != nil {
		return w
	}
	cm, err := c.configMaps.ConfigMaps(c.opts.Namespace).Get(name)
	if err != nil {
		return nil
	}
	return cm
}

// deleteStaleSlices deletes the node slices and site indexes not in
// want, after the indexes and the base that no longer list them were
// written.
func (c *Controller) deleteStaleSlices(ctx context.Context, want map[string]bool, attempted *atomic.Bool) (int, error) {
	stale := map[string]bool{}
	cached, err := c.configMaps.ConfigMaps(c.opts.Namespace).List(labels.SelectorFromSet(labels.Set{catalog.CatalogLabel: catalog.KindNodes}))
	if err != nil {
		return 0, err
	}
	indexes, err := c.configMaps.ConfigMaps(c.opts.Namespace).List(labels.SelectorFromSet(labels.Set{catalog.CatalogLabel: catalog.KindIndex}))
	if err != nil {
		return 0, err
	}
	for _, cm := range append(cached, indexes...) {
		if !want[cm.Name] {
			stale[cm.Name] = true
		}
	}
	c.catalogMu.Lock()
	for name, cm := range c.catalogWritten {
		if k := cm.Labels[catalog.CatalogLabel]; !want[name] && (k == catalog.KindNodes || k == catalog.KindIndex) {
			stale[name] = true
		}
	}
	c.catalogMu.Unlock()
	names := make([]string, 0, len(stale))
	for n := range stale {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		attempted.Store(true)
		err := c.client.CoreV1().ConfigMaps(c.opts.Namespace).Delete(ctx, name, metav1.DeleteOptions{})
		c.countWrite("configmap", err)
		if err != nil && !apierrors.IsNotFound(err) {
			return 0, fmt.Errorf("delete stale slice %s: %w", name, err)
		}
		c.catalogMu.Lock()
		delete(c.catalogWritten, name)
		c.catalogMu.Unlock()
		c.metrics.catalogWrites.WithLabelValues("delete").Inc()
	}
	return len(names), nil
}

// configMapChanged re-publishes when a catalog object changed in a way
// this leader did not write (edited or deleted by someone else); the
// echo of its own writes carries the resourceVersion it wrote.
func (c *Controller) configMapChanged(obj any, deleted bool) {
	if !c.leading.Load() {
		return
	}
	cm, ok := obj.(*corev1.ConfigMap)
	if !ok {
		c.enqueueCatalog()
		return
	}
	c.catalogMu.Lock()
	w := c.catalogWritten[cm.Name]
	c.catalogMu.Unlock()
	if !deleted && w != nil && w.ResourceVersion == cm.ResourceVersion {
		return
	}
	c.enqueueCatalog() // a delete of a stale slice makes one idle publication

}
