package e2e

import (
	"encoding/json"
	"os/exec"
	"path/filepath"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/internal/tcptest"
	"github.com/bridgehead/bridgehead/verify"
)

// labAPIServer starts a real kube-apiserver with deploy/kubernetes/
// verify-rbac.yaml applied and makes it reachable from the lab at
// addr (in namespace ns, e.g. gateway A's LAN address: the API server
// lives in site A, site B reaches it through the gateways). It returns
// the env and a kubeconfig for the lab that acts as verify's
// ServiceAccount (bridgehead-verify/bridgehead-verify).
func (l *lab) labAPIServer(ns, addr string) (*kubetest.Env, string) {
	t := l.t
	t.Helper()
	env := kubetest.Start(t)
	// verify-rbac.yaml reaches into the controller's namespace (its
	// account reads the published catalog there), which namespace.yaml
	// makes.
	if out, err := exec.Command("kubectl", "--kubeconfig", env.Kubeconfig, "apply",
		"-f", filepath.Join(l.root, "deploy/kubernetes/namespace.yaml"),
		"-f", filepath.Join(l.root, "deploy/kubernetes/verify-rbac.yaml")).CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply verify-rbac.yaml: %v\n%s", err, out)
	}
	ln, err := listenIn(l.ns(ns), addr) // follow_test.go
	if err != nil {
		t.Fatal(err)
	}
	upstream := env.Config.Host[len("https://"):]
	tcptest.Forward(t, ln, upstream)
	kc, err := clientcmd.LoadFromFile(env.Kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range kc.Clusters {
		c.Server = "https://" + addr
		c.TLSServerName = "127.0.0.1" // the serving certificate's address
	}
	user, groups := kubetest.ServiceAccount("bridgehead-verify", "bridgehead-verify")
	for _, a := range kc.AuthInfos {
		a.Impersonate, a.ImpersonateGroups = user, groups
	}
	path := filepath.Join(l.dir, "verify-kubeconfig")
	if err := clientcmd.WriteToFile(*kc, path); err != nil {
		t.Fatal(err)
	}
	return env, path
}

// collectMatrix runs `bridgehead verify --collect --format json` with the
// admin kubeconfig and returns the matrix and whether it exited 0.
func (l *lab) collectMatrix(env *kubetest.Env, catalog string) (*verify.Matrix, string, bool) {
	l.t.Helper()
	cmd := exec.Command(filepath.Join(l.bin, "bridgehead"), "verify", "--collect", "--config", catalog,
		"--kubeconfig", env.Kubeconfig, "--format", "json", "--max-age", "10m")
	out, err := cmd.Output()
	var m verify.Matrix
	if jerr := json.Unmarshal(out, &m); jerr != nil {
		l.t.Fatalf("verify --collect: %v %v\n%s", err, jerr, out)
	}
	return &m, string(out), err == nil
}
