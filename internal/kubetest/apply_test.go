package kubetest

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestCreateObjects creates a ServiceAccount in a namespace that does not
// exist yet (CreateObjects creates it) and a ClusterRole, then creates
// them again: what exists is left as it is.
func TestCreateObjects(t *testing.T) {
	env := Start(t)
	sa := &corev1.ServiceAccount{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
		ObjectMeta: metav1.ObjectMeta{Name: "probe", Namespace: "bhk-create"},
	}
	role := &rbacv1.ClusterRole{
		TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
		ObjectMeta: metav1.ObjectMeta{Name: "bhk-create-probe"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get"}}},
	}
	env.CreateObjects(t, sa, role)
	env.CreateObjects(t, sa, role)
	cs := env.Clientset(t)
	ctx := context.Background()
	if _, err := cs.CoreV1().Namespaces().Get(ctx, "bhk-create", metav1.GetOptions{}); err != nil {
		t.Errorf("namespace: %v", err)
	}
	if _, err := cs.CoreV1().ServiceAccounts("bhk-create").Get(ctx, "probe", metav1.GetOptions{}); err != nil {
		t.Errorf("service account: %v", err)
	}
	got, err := cs.RbacV1().ClusterRoles().Get(ctx, "bhk-create-probe", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("cluster role: %v", err)
	}
	if len(got.Rules) != 1 || got.Rules[0].Verbs[0] != "get" {
		t.Errorf("cluster role rules %+v", got.Rules)
	}
}
