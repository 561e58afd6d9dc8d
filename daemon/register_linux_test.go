//go:build linux

package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// TestRunRegisters: a gateway run with a kubernetes section publishes
// its public key, endpoint and Ready condition into its own Gateway
// object's status, with its own credential (the real API server), and
// stops the publisher on shutdown (TestMain checks for leaks).
func TestRunRegisters(t *testing.T) {
	needsNetns(t) // and an API server
	env := kubetest.Start(t)
	env.InstallCRDs(t, "../deploy/kubernetes/crds")
	ctx := context.Background()
	const name = "site-a.gw-a1"
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gwRes := admin.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource))
	m, _ := kruntime.DefaultUnstructuredConverter.ToUnstructured(&v1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.GatewaySpec{Site: "site-a", Address: "10.1.0.2"}})
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1.SchemeGroupVersion.String())
	u.SetKind("Gateway")
	if _, err := gwRes.Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cs := env.Clientset(t)
	for _, o := range kube.GatewayRBAC(name) {
		createObject(t, cs, o)
	}

	dir := t.TempDir()
	// The gateway's kubeconfig: the admin's, acting as the gateway's
	// ServiceAccount, so every write is authorized as the gateway.
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	user, groups := kubetest.ServiceAccount(kube.GatewayNamespace, name)
	for _, a := range kc.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, groups
	}
	if err := clientcmd.WriteToFile(*kc, filepath.Join(dir, "gw.kubeconfig")); err != nil {
		t.Fatal(err)
	}
	k := newLabKeys(t, dir)
	path := k.write(t, dir, "a",
		k.siteYAML("a", "10.1.0.0/24", "10.11.0.0/16", epA.String()),
		k.siteYAML("b", "10.2.0.0/24", "10.12.0.0/16", epB.String()))
	raw := mustRead(t, path)
	if err := os.WriteFile(path, []byte(strings.Replace(raw, "sites:\n", "kubernetes: {kubeconfig: gw.kubeconfig}\nsites:\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}

	stop := runInNetns(t, netns.None(), path)
	defer stop()

	// Site b's gateway never answers: the gateway is up but not ready.
	deadline := time.Now().Add(20 * time.Second)
	var st v1.GatewayStatus
	for {
		got, err := gwRes.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		var g v1.Gateway
		if err := kruntime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &g); err != nil {
			t.Fatal(err)
		}
		st = g.Status
		if st.PublicKey != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no status published within 20 s: %+v", st)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if want := k.priv["a"].PublicKey().String(); st.PublicKey != want {
		t.Errorf("published key %s, want %s", st.PublicKey, want)
	}
	if st.Endpoint != epA.String() || st.RemoteGateways != 1 || st.RemoteGatewaysUp != 0 {
		t.Errorf("published status %+v", st)
	}
	var ready *metav1.Condition
	for i := range st.Conditions {
		if st.Conditions[i].Type == v1.ConditionReady {
			ready = &st.Conditions[i]
		}
	}
	if ready == nil || ready.Status != metav1.ConditionFalse || ready.Reason != "NoRemoteSite" || !strings.Contains(ready.Message, "site-b") {
		t.Errorf("Ready condition %+v, want False, NoRemoteSite naming site-b", ready)
	}
}

func createObject(t *testing.T, cs kubernetes.Interface, o kruntime.Object) {
	t.Helper()
	ctx := context.Background()
	var err error
	switch o := o.(type) {
	case *corev1.ServiceAccount:
		_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: o.Namespace}}, metav1.CreateOptions{})
		if err == nil || strings.Contains(err.Error(), "already exists") {
			_, err = cs.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
		}
	case *rbacv1.ClusterRole:
		_, err = cs.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = cs.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	default:
		t.Fatalf("unexpected %T", o)
	}
	if err != nil {
		t.Fatal(err)
	}
}
