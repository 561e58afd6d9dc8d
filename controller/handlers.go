package controller

import (
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
)

// Informer handlers run on the informers' goroutines: they only add keys.
// Before this replica leads they add nothing; lead enqueues everything.

func (c *Controller) enqueueNode(obj any) {
	if !c.leading.Load() {
		return
	}
	if key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj); err == nil {
		c.nodeQueue.Add(key)
	}
}

// nodeAddedOrDeleted enqueues the node, and the catalog when the node is
// in it (it has a site and blocks).
func (c *Controller) nodeAddedOrDeleted(obj any) {
	c.enqueueNode(obj)
	n, ok := obj.(*corev1.Node)
	if d, tomb := obj.(cache.DeletedFinalStateUnknown); tomb {
		n, ok = d.Obj.(*corev1.Node)
	}
	if !ok || inCatalog(n) {
		c.enqueueCatalog()
	}
}

func inCatalog(n *corev1.Node) bool {
	return n.Labels[LabelSite] != "" && n.Annotations[AnnotationPodCIDRs] != ""
}

// nodeUpdated enqueues a node when a field the reconcile reads changed
// (kubelet's periodic status writes change none of them).
func (c *Controller) nodeUpdated(old, cur any) {
	o, ok1 := old.(*corev1.Node)
	n, ok2 := cur.(*corev1.Node)
	if ok1 && ok2 && o.ResourceVersion != n.ResourceVersion &&
		slices.Equal(o.Status.Addresses, n.Status.Addresses) &&
		o.Labels[LabelSite] == n.Labels[LabelSite] &&
		o.Annotations[AnnotationPodCIDRs] == n.Annotations[AnnotationPodCIDRs] &&
		slices.Equal(o.Spec.PodCIDRs, n.Spec.PodCIDRs) &&
		siteCondition(o) == siteCondition(n) {
		return
	}
	c.enqueueNode(cur)
	// What the catalog reads: the site, the blocks, the InternalIPs.
	if ok1 && ok2 && (inCatalog(o) || inCatalog(n)) && (o.Labels[LabelSite] != n.Labels[LabelSite] ||
		o.Annotations[AnnotationPodCIDRs] != n.Annotations[AnnotationPodCIDRs] ||
		!slices.Equal(internalIPs(o), internalIPs(n))) {
		c.enqueueCatalog()
	}
}

func siteCondition(n *corev1.Node) corev1.NodeCondition {
	for _, cond := range n.Status.Conditions {
		if cond.Type == NodeConditionSite {
			cond.LastHeartbeatTime, cond.LastTransitionTime = metav1.Time{}, metav1.Time{}
			return cond
		}
	}
	return corev1.NodeCondition{}
}

// siteChanged marks the sites dirty and enqueues every site: an added or
// removed Site can change the others' overlaps.
func (c *Controller) siteChanged(any) {
	c.sitesDirty.Store(true)
	if !c.leading.Load() {
		return
	}
	for _, s := range c.siteNames() {
		c.siteQueue.Add(s)
	}
	c.enqueueCatalog()
}

// siteUpdated ignores the controller's own status writes (the generation
// moves only with the spec).
func (c *Controller) siteUpdated(old, cur any) {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := cur.(*unstructured.Unstructured)
	if ok1 && ok2 && o.GetGeneration() == n.GetGeneration() && maps.Equal(o.GetLabels(), n.GetLabels()) &&
		o.GetDeletionTimestamp().IsZero() == n.GetDeletionTimestamp().IsZero() && slices.Equal(o.GetFinalizers(), n.GetFinalizers()) {
		return
	}
	c.siteChanged(cur)
}

// gatewayUpdated skips updates that change neither the spec, the
// registered key and endpoint, nor the conditions (a gateway's periodic
// remote counts).
func (c *Controller) gatewayUpdated(old, cur any) {
	o, ok1 := old.(*unstructured.Unstructured)
	n, ok2 := cur.(*unstructured.Unstructured)
	if ok1 && ok2 {
		same := func(path ...string) bool {
			a, _, _ := unstructured.NestedFieldNoCopy(o.Object, path...)
			b, _, _ := unstructured.NestedFieldNoCopy(n.Object, path...)
			return equality.Semantic.DeepEqual(a, b)
		}
		if same("spec") && same("status", "publicKey") && same("status", "endpoint") && same("status", "conditions") {
			return
		}
	}
	c.gatewayChanged(cur)
}

// gatewayChanged refreshes the status of the gateway's site (the gateway
// counts), coalesced like node changes.
func (c *Controller) gatewayChanged(obj any) {
	if !c.leading.Load() {
		return
	}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return
	}
	if s, _, _ := unstructured.NestedString(u.Object, "spec", "site"); s != "" {
		c.siteQueue.AddAfter(s, c.opts.StatusInterval)
	}
	c.enqueueCatalog()
}

func everything() labels.Selector { return labels.Everything() }

func metavOf(name, ns string) metav1.ObjectMeta {
	return metav1.ObjectMeta{Name: name, Namespace: ns}
}

func metaName(obj any) (string, error) {
	m, err := meta.Accessor(obj)
	if err != nil {
		return "", err
	}
	return m.GetName(), nil
}

// Informer transforms: the caches keep only what the controller reads.
// A kubelet's Node is mostly what the controller never looks at
// (managedFields, status.images, nodeInfo, capacity, the kubelet's
// conditions); at 10,000 Nodes those are most of the controller's heap
// (BenchmarkNodeCacheHeap). The transforms run on the informers'
// goroutines before an object reaches the cache or a handler, and build
// new objects (they never modify the one decoded, and are idempotent).
// Every write of a Node is a patch carrying only its own fields, and
// writes of a Site or ConfigMap from a cached copy keep the server's
// managedFields (an update without them keeps them), so nothing stripped
// is ever written back.

// transformNode keeps of a Node its name, UID, resourceVersion, creation
// and deletion times, the bridgehead.io/ labels and annotations (the
// controller reads LabelSite and AnnotationPodCIDRs, nothing else),
// spec.podCIDR(s), status.addresses and the controller's own condition
// (NodeConditionSite). Tombstones and other types pass unchanged.
func transformNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, UID: n.UID, ResourceVersion: n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp, DeletionTimestamp: n.DeletionTimestamp,
			Labels: ownKeys(n.Labels), Annotations: ownKeys(n.Annotations)},
		Spec: corev1.NodeSpec{PodCIDR: n.Spec.PodCIDR, PodCIDRs: n.Spec.PodCIDRs},
	}
	out.Status.Addresses = n.Status.Addresses
	for _, c := range n.Status.Conditions {
		if c.Type == NodeConditionSite {
			out.Status.Conditions = append(out.Status.Conditions, c)
		}
	}
	return out, nil
}

// ownPrefix: the labels and annotations transformNode keeps.
const ownPrefix = "bridgehead.io/"

// ownKeys is the entries of m whose keys start with ownPrefix (nil when
// none).
func ownKeys(m map[string]string) map[string]string {
	var out map[string]string
	for k, v := range m {
		if strings.HasPrefix(k, ownPrefix) {
			if out == nil {
				out = map[string]string{}
			}
			out[k] = v
		}
	}
	return out
}

// stripManagedFields is the transform of the Site, Gateway and ConfigMap
// informers: the object without metadata.managedFields (a shallow copy
// for a typed object; an unstructured one is copied before the field is
// removed).
func stripManagedFields(obj any) (any, error) {
	switch o := obj.(type) {
	case *unstructured.Unstructured:
		md, _ := o.Object["metadata"].(map[string]any)
		if _, ok := md["managedFields"]; !ok {
			return o, nil
		}
		cp := &unstructured.Unstructured{Object: maps.Clone(o.Object)}
		md = maps.Clone(md)
		delete(md, "managedFields")
		cp.Object["metadata"] = md
		return cp, nil
	case *corev1.ConfigMap:
		if o.ManagedFields == nil {
			return o, nil
		}
		cp := *o
		cp.ManagedFields = nil
		return &cp, nil
	}
	return obj, nil
}
