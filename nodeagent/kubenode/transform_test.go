package kubenode

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
)

// TestTransformNode: the agent's cache of its own Node keeps the name,
// UID and labels it reads, and none of the kubelet's status or the
// managedFields; the decoded Node is not modified.
func TestTransformNode(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "9", Labels: map[string]string{SiteLabel: "site-a", "kubernetes.io/os": "linux"},
			Annotations: map[string]string{"node.alpha.kubernetes.io/ttl": "0"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubelet"}}},
		Status: corev1.NodeStatus{Images: []corev1.ContainerImage{{Names: []string{"x"}}}, NodeInfo: corev1.NodeSystemInfo{KubeletVersion: "v1.37.2"},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}}},
	}
	orig := n.DeepCopy()
	got, err := transformNode(n)
	if err != nil {
		t.Fatal(err)
	}
	want := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1", UID: "u1", ResourceVersion: "9", Labels: n.Labels}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("transformNode = %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(n, orig) {
		t.Error("input modified")
	}
	tomb := cache.DeletedFinalStateUnknown{Key: "n1", Obj: n}
	if got, _ := transformNode(tomb); !reflect.DeepEqual(got, tomb) {
		t.Error("tombstone changed")
	}
}
