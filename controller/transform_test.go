package controller

import (
	"context"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
)

// TestTransformNode: the cached Node keeps what the controller reads
// (every field a reconcile, the plan, the audit or a handler looks at)
// and loses the rest; the input is not modified; a second pass changes
// nothing; tombstones pass through.
func TestTransformNode(t *testing.T) {
	n := kubeletNode(7)
	n.UID, n.ResourceVersion = "uid-7", "42"
	n.CreationTimestamp = metav1.Now()
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	orig := n.DeepCopy()
	got, err := transformNode(n)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(n, orig) {
		t.Error("transformNode modified its input")
	}
	out := got.(*corev1.Node)
	if out.Name != n.Name || out.UID != n.UID || out.ResourceVersion != n.ResourceVersion || !out.CreationTimestamp.Equal(&n.CreationTimestamp) ||
		out.Labels[LabelSite] != n.Labels[LabelSite] || out.Annotations[AnnotationPodCIDRs] != n.Annotations[AnnotationPodCIDRs] ||
		!reflect.DeepEqual(out.Spec.PodCIDRs, n.Spec.PodCIDRs) || out.Spec.PodCIDR != n.Spec.PodCIDR ||
		!reflect.DeepEqual(out.Status.Addresses, n.Status.Addresses) || siteCondition(out) != siteCondition(n) ||
		!reflect.DeepEqual(internalIPs(out), internalIPs(n)) || inCatalog(out) != inCatalog(n) {
		t.Errorf("lost a field the controller reads:\n%+v", out)
	}
	if len(out.ManagedFields) != 0 || len(out.Status.Images) != 0 || out.Status.NodeInfo != (corev1.NodeSystemInfo{}) ||
		len(out.Status.Capacity) != 0 || len(out.Status.Conditions) != 1 || len(out.Annotations) != 1 || len(out.Labels) != 1 || out.Spec.ProviderID != "" {
		t.Errorf("kept what the controller never reads:\n%+v", out)
	}
	again, _ := transformNode(out)
	if !reflect.DeepEqual(again, out) {
		t.Error("a second pass changed the node")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "x", Obj: n}
	if got, _ := transformNode(tomb); !reflect.DeepEqual(got, tomb) {
		t.Error("tombstone changed")
	}
}

func TestStripManagedFields(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{"metadata": map[string]any{"name": "s", "managedFields": []any{map[string]any{"manager": "kubectl"}}}, "spec": map[string]any{"x": 1}}}
	got, _ := stripManagedFields(u)
	if _, ok := got.(*unstructured.Unstructured).Object["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("unstructured: managedFields kept")
	}
	if _, ok := u.Object["metadata"].(map[string]any)["managedFields"]; !ok {
		t.Error("unstructured: input modified")
	}
	if got.(*unstructured.Unstructured).GetName() != "s" {
		t.Error("unstructured: name lost")
	}
	if got, _ := stripManagedFields(&unstructured.Unstructured{Object: map[string]any{}}); got == nil {
		t.Error("no metadata")
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "m"}}}, Data: map[string]string{"k": "v"}}
	got, _ = stripManagedFields(cm)
	if g := got.(*corev1.ConfigMap); g.ManagedFields != nil || g.Data["k"] != "v" || cm.ManagedFields == nil {
		t.Errorf("configmap: %+v (input %+v)", g, cm)
	}
}

// TestListNodesKeepsWhatTheCacheKeeps: the Nodes a new leader's rebuild
// lists are held as transformNode keeps them, not whole (whole kubelet
// Nodes held 191 MiB at 10,000 until the rebuild ended).
func TestListNodesKeepsWhatTheCacheKeeps(t *testing.T) {
	n := kubeletNode(3)
	n.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubelet", Operation: metav1.ManagedFieldsOperationUpdate}}
	want, _ := transformNode(n.DeepCopy())
	nodes, err := listNodes(context.Background(), fake.NewClientset(n))
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes) != 1 || !reflect.DeepEqual(nodes[0], want) {
		t.Errorf("listNodes: %+v\nwant the cache's copy %+v", nodes, want)
	}
}
