package kube

import (
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// GatewayNamespace holds one ServiceAccount per gateway. The ClusterRole
// bridgehead-gateway-read (deploy/kubernetes) is bound to the group of
// this namespace's ServiceAccounts: every gateway reads Sites and
// Gateways, which hold no secrets.
const GatewayNamespace = "bridgehead-gateways"

// GatewayRolePrefix starts the name of each gateway's own ClusterRole and
// ClusterRoleBinding.
const GatewayRolePrefix = "bridgehead-gateway:"

// GatewayRBAC is the credential model of one gateway (see
// deploy/kubernetes/README.md): a ServiceAccount named after its Gateway
// in GatewayNamespace, and a ClusterRole bound to it alone that grants
// get/update/patch on that one Gateway's status (resourceNames). Nothing
// else is writable: not its spec, not another Gateway, not a Site.
func GatewayRBAC(gatewayName string) []runtime.Object {
	labels := map[string]string{"app.kubernetes.io/part-of": "bridgehead", v1.GroupName + "/gateway": gatewayName}
	role := GatewayRolePrefix + gatewayName
	return []runtime.Object{
		&corev1.ServiceAccount{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: gatewayName, Namespace: GatewayNamespace, Labels: labels},
		},
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels},
			Rules: []rbacv1.PolicyRule{
				{APIGroups: []string{v1.GroupName}, Resources: []string{v1.GatewaysResource + "/status"}, ResourceNames: []string{gatewayName}, Verbs: []string{"get", "update", "patch"}},
			},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: role, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: gatewayName, Namespace: GatewayNamespace}},
		},
	}
}
