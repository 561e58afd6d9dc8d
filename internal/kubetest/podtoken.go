package kubetest

import (
	"context"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// PodServiceAccountConfig returns a client config that authenticates as
// ServiceAccount ns/name with a token bound to a pod on node, as the
// kubelet mounts in a pod: TokenRequest with a boundObjectRef to a Pod
// (created here, named pod, in ns) whose spec.nodeName is node. The API
// server adds the node's name to the token's claims, and to the request's
// user extra authentication.kubernetes.io/node-name, which admission
// policies can key on. Nothing runs the pod (there is no scheduler or
// kubelet); the token stays valid while the pod exists. The
// ServiceAccount must exist; the Node need not.
func (e *Env) PodServiceAccountConfig(t testing.TB, ns, name, pod, node string) *rest.Config {
	t.Helper()
	cs := e.Clientset(t)
	ctx := context.Background()
	p, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: pod, Namespace: ns},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: name,
			Containers: []corev1.Container{{Name: "c", Image: "kubetest.invalid/none"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: pod %s/%s on %s: %v", ns, pod, node, err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		ExpirationSeconds: &exp,
		BoundObjectRef:    &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: p.Name, UID: p.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token of ServiceAccount %s/%s bound to pod %s: %v", ns, name, pod, err)
	}
	return e.tokenConfig(tr.Status.Token)
}
