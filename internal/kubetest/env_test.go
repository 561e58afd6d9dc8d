package kubetest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// TestEnv starts the real etcd and kube-apiserver, writes and reads an
// object with the admin identity and with kubectl, checks that RBAC
// refuses an impersonated ServiceAccount, then stops the API server
// alone and starts it again: the object is still there.
func TestEnv(t *testing.T) {
	env := Start(t)
	t.Logf("etcd ready in %v, kube-apiserver ready in %v", env.EtcdReady, env.APIServerReady)
	cs := env.Clientset(t)
	ctx := context.Background()
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bhk-probe", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create: %v", err)
	}

	if kubectl, err := exec.LookPath("kubectl"); err == nil {
		out, err := exec.Command(kubectl, "--kubeconfig", env.Kubeconfig, "get", "configmap", "bhk-probe", "-n", "default", "-o", "jsonpath={.data.k}").CombinedOutput()
		if err != nil || string(out) != "v" {
			t.Errorf("kubectl get: %q, %v", out, err)
		}
	} else if os.Getenv("CI") != "" {
		t.Errorf("kubectl not found: %v", err)
	}

	user, groups := ServiceAccount("default", "nobody")
	nobody, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := nobody.CoreV1().ConfigMaps("default").Get(ctx, "bhk-probe", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("impersonated ServiceAccount reading a ConfigMap: %v, want forbidden", err)
	}

	if err := env.StopAPIServer(); err != nil {
		t.Fatalf("stop API server: %v", err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	_, err = cs.CoreV1().ConfigMaps("default").Get(short, "bhk-probe", metav1.GetOptions{})
	cancel()
	if err == nil {
		t.Fatal("API server answered after StopAPIServer")
	}
	if err := env.StartAPIServer(); err != nil {
		t.Fatalf("restart API server: %v", err)
	}
	t.Logf("kube-apiserver restarted, ready in %v", env.APIServerReady)
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "bhk-probe", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("after restart: %v %v", got, err)
	}
}

func TestStartSkipsWithoutBinaries(t *testing.T) {
	if err := Available(t.TempDir()); err == nil || !strings.Contains(err.Error(), "make kube-testenv") {
		t.Errorf("Available(empty dir) = %v, want an error naming make kube-testenv", err)
	}
}
