package v1alpha1_test

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"testing"
)

// TestGeneratedUpToDate runs `make generate`'s two controller-gen
// commands (the version pinned in the Makefile) into a temporary
// directory and compares the output with the committed deepcopy and
// CRDs, so a marker or type change without `make generate` fails.
func TestGeneratedUpToDate(t *testing.T) {
	if testing.Short() {
		t.Skip("builds controller-gen; not in -short")
	}
	root, err := filepath.Abs("../../..")
	if err != nil {
		t.Fatal(err)
	}
	mk, err := os.ReadFile(filepath.Join(root, "Makefile"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^CONTROLLER_GEN_VERSION := (\S+)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("Makefile: no CONTROLLER_GEN_VERSION")
	}
	tool := "sigs.k8s.io/controller-tools/cmd/controller-gen@" + string(m[1])
	tmp := t.TempDir()
	run := func(args ...string) {
		t.Helper()
		cmd := exec.Command("go", append([]string{"run", tool}, args...)...)
		cmd.Dir = root
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("controller-gen %v: %v\n%s", args, err, out)
		}
	}
	run("object", "paths=./kube/apis/...", "output:object:dir="+filepath.Join(tmp, "object"))
	run("crd", "paths=./kube/apis/...", "output:crd:artifacts:config="+filepath.Join(tmp, "crds"))

	compare := func(got, want string) {
		t.Helper()
		g, err := os.ReadFile(got)
		if err != nil {
			t.Fatal(err)
		}
		w, err := os.ReadFile(want)
		if err != nil {
			t.Fatalf("%v (run `make generate`)", err)
		}
		if !bytes.Equal(g, w) {
			t.Errorf("%s is out of date: run `make generate`", want)
		}
	}
	compare(filepath.Join(tmp, "object", "zz_generated.deepcopy.go"), filepath.Join(root, "kube/apis/v1alpha1/zz_generated.deepcopy.go"))
	crds, err := filepath.Glob(filepath.Join(tmp, "crds", "*.yaml"))
	if err != nil || len(crds) == 0 {
		t.Fatalf("controller-gen wrote no CRDs (%v)", err)
	}
	committed, _ := filepath.Glob(filepath.Join(root, "deploy/kubernetes/crds", "*.yaml"))
	if len(committed) != len(crds) {
		t.Errorf("deploy/kubernetes/crds has %d files, controller-gen writes %d: run `make generate`", len(committed), len(crds))
	}
	for _, f := range crds {
		compare(f, filepath.Join(root, "deploy/kubernetes/crds", filepath.Base(f)))
	}
}
