package follow

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestStripManagedFields(t *testing.T) {
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "c", Labels: map[string]string{"a": "b"}, ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "bridgehead-controller"}}},
		Data: map[string]string{"nodes.yaml": "nodes:\n"}}
	got, err := stripManagedFields(cm)
	if err != nil {
		t.Fatal(err)
	}
	g := got.(*corev1.ConfigMap)
	if g.ManagedFields != nil || g.Name != "c" || g.Labels["a"] != "b" || g.Data["nodes.yaml"] != "nodes:\n" {
		t.Errorf("stripped %+v", g)
	}
	if cm.ManagedFields == nil {
		t.Error("input modified")
	}
	if got, _ := stripManagedFields("x"); got != "x" {
		t.Error("non-ConfigMap changed")
	}
}
