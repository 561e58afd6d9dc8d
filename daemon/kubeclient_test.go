package daemon

import (
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestRestConfigInCluster: kubernetes.inCluster outside a pod fails the
// start naming the config and the field, not a kubeconfig.
func TestRestConfigInCluster(t *testing.T) {
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	t.Setenv("KUBERNETES_SERVICE_PORT", "")
	cfg := &config.Config{Path: "/etc/bridgehead/bridgehead.yaml", Kubernetes: &config.Kubernetes{InCluster: true}}
	_, err := restConfig(cfg)
	if err == nil || !strings.Contains(err.Error(), "/etc/bridgehead/bridgehead.yaml: kubernetes.inCluster: ") {
		t.Fatalf("in-cluster outside a pod: %v", err)
	}
	if _, err := kubeClient(cfg); err == nil {
		t.Fatal("kubeClient made a client outside a pod")
	}
}
