package kubenetpol

import (
	"os"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	"sigs.k8s.io/yaml"
)

// TestHintsNameTheDaemonSet: the fixes the check prints name the
// DaemonSet and select its pods as deploy/kubernetes/node-daemonset.yaml
// has them, so an operator who pastes one finds the agent.
func TestHintsNameTheDaemonSet(t *testing.T) {
	b, err := os.ReadFile("../../deploy/kubernetes/node-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds appsv1.DaemonSet
	for _, doc := range strings.Split(string(b), "\n---") {
		var d appsv1.DaemonSet
		if err := yaml.Unmarshal([]byte(doc), &d); err == nil && d.Kind == "DaemonSet" {
			ds = d
		}
	}
	if ds.Name == "" || ds.Namespace == "" {
		t.Fatal("no DaemonSet with a name and namespace in node-daemonset.yaml")
	}
	for _, c := range causes {
		if strings.Contains(c.fix, "DaemonSet") || strings.Contains(c.fix, "ds/") || strings.Contains(c.fix, " ds ") {
			if !strings.Contains(c.fix, ds.Name) {
				t.Errorf("%s: %q does not name the DaemonSet %s", c.key, c.fix, ds.Name)
			}
		}
		if strings.Contains(c.fix, "kubectl -n ") && !strings.Contains(c.fix, "kubectl -n "+ds.Namespace+" ") {
			t.Errorf("%s: %q does not look in the DaemonSet's namespace %s", c.key, c.fix, ds.Namespace)
		}
		_, sel, ok := strings.Cut(c.fix, " -l ")
		if !ok {
			continue
		}
		sel, _, _ = strings.Cut(sel, " ")
		for _, kv := range strings.Split(sel, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if got, ok := ds.Spec.Template.Labels[k]; !ok || got != v {
				t.Errorf("%s: selector %s: the agent's pods have %s=%q (labels %v)", c.key, sel, k, got, ds.Spec.Template.Labels)
			}
		}
	}
}
