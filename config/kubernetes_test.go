package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// kubeAt adds a kubernetes section after line 18 of the fixture; its
// first line is then line 19.
func kubeAt(section string) map[int]string {
	return map[int]string{18: "clampMSS: false\n" + section}
}

func TestKubernetesSection(t *testing.T) {
	c := mustParse(t, nil)
	if c.Kubernetes != nil {
		t.Errorf("kubernetes on without the section: %+v", *c.Kubernetes)
	}
	c = mustParse(t, kubeAt("kubernetes:\n  kubeconfig: /etc/bridgehead/kubeconfig"))
	k := c.Kubernetes
	if k == nil {
		t.Fatal("kubernetes section not decoded")
	}
	if want := c.Site + "." + c.Gateway; k.Gateway != want {
		t.Errorf("gateway defaults to %q, want %q", k.Gateway, want)
	}
	if c.KubeconfigPath() != "/etc/bridgehead/kubeconfig" {
		t.Errorf("KubeconfigPath %q", c.KubeconfigPath())
	}
	c = mustParse(t, kubeAt("kubernetes:\n  kubeconfig: kc\n  gateway: other.gw"))
	if c.Kubernetes.Gateway != "other.gw" {
		t.Errorf("gateway %q, want other.gw", c.Kubernetes.Gateway)
	}
	if want := filepath.Join(filepath.Dir(c.Path), "kc"); c.Path != "" && c.KubeconfigPath() != want {
		t.Errorf("relative kubeconfig resolved to %q, want %q", c.KubeconfigPath(), want)
	}
}

func TestKubernetesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		want          []want
	}{
		{"no kubeconfig", "kubernetes:\n  gateway: a.b", []want{{19, "kubernetes.kubeconfig", "is required"}}},
		{"unknown field", "kubernetes:\n  kubeconfig: kc\n  kubeConfig: kc",
			[]want{{21, "kubernetes.kubeConfig", `did you mean "kubeconfig"`}}},
		{"not a mapping", "kubernetes: yes", []want{{19, "kubernetes", "want a mapping"}, {19, "kubernetes.kubeconfig", "is required"}}},
		{"list value", "kubernetes:\n  kubeconfig: [a, b]", []want{{20, "kubernetes.kubeconfig", "want a single value"}, {20, "kubernetes.kubeconfig", "is required"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFixture(t, kubeAt(tc.section))
			if err == nil {
				t.Fatal("accepted")
			}
			matchErrors(t, asList(t, err), tc.want)
		})
	}
}

// TestKubernetesCheck: check on the gateway reports a kubeconfig it
// cannot read, naming the field and line; away from it, it does not look.
func TestKubernetesCheck(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.kubeconfig")
	c := mustParse(t, kubeAt("kubernetes:\n  kubeconfig: "+missing))
	readKey := func(string) ([]byte, error) { return nil, nil }
	if problems, _ := Check(c, CheckOptions{SkipPrivateKey: true}); len(problems) != 0 {
		t.Errorf("kubeconfig checked with SkipPrivateKey: %v", problems)
	}
	problems, _ := Check(c, CheckOptions{ReadFile: readKey})
	found := false
	for _, p := range problems {
		if p.Field == "kubernetes.kubeconfig" && p.Line == 20 && strings.Contains(p.Msg, "cannot read the kubeconfig") && strings.Contains(p.Msg, missing) {
			found = true
		}
	}
	if !found {
		t.Errorf("missing kubeconfig not reported: %v", problems)
	}
	if err := os.WriteFile(missing, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, _ = Check(c, CheckOptions{ReadFile: readKey})
	for _, p := range problems {
		if strings.HasPrefix(p.Field, "kubernetes") {
			t.Errorf("readable kubeconfig reported: %v", p)
		}
	}
}
