package kubereport

import (
	"bytes"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/verify"
)

func TestName(t *testing.T) {
	tests := []struct{ site, node, want string }{
		{"a", "a1", "verify-a-a1"},
		{"site-a", "a1", "verify-site-a-a1-"}, // hashed: "site-a"+"a1" and "site"+"a-a1" differ
		{"Site_B", "B1.example", "verify-site-b-b1-example-"},
		{"a", strings.Repeat("n", 300), "verify-a-nnn"},
	}
	seen := map[string]bool{}
	for _, tt := range tests {
		got := Name(tt.site, tt.node)
		if !strings.HasPrefix(got, tt.want) || len(validation.IsDNS1123Subdomain(got)) > 0 {
			t.Errorf("Name(%q, %q) = %q, want a DNS subdomain starting %q", tt.site, tt.node, got, tt.want)
		}
		if seen[got] {
			t.Errorf("Name(%q, %q) = %q twice", tt.site, tt.node, got)
		}
		seen[got] = true
	}
	if Name("site-a", "a1") == Name("site", "a-a1") {
		t.Error("site-a/a1 and site/a-a1 share a name")
	}
}

// TestPublishCollect against a real kube-apiserver: reports published
// with exactly the credential of deploy/kubernetes/verify-rbac.yaml
// (applied with kubectl, requests impersonating the ServiceAccount), one
// of them twice (an update), are collected with the operator's identity
// into the site × check matrix: a failing check, a stale report, a site
// without one, and a broken ConfigMap named as a problem.
func TestPublishCollect(t *testing.T) {
	env := kubetest.Start(t)
	admin := env.Clientset(t)
	ctx := context.Background()
	// verify-rbac.yaml reaches into the controller's namespace (the
	// catalog), which the kustomization makes first.
	if _, err := admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-system"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("kubectl", "--kubeconfig", env.Kubeconfig, "apply", "-f", "../../deploy/kubernetes/verify-rbac.yaml").CombinedOutput(); err != nil {
		t.Fatalf("kubectl apply verify-rbac.yaml: %v\n%s", err, out)
	}
	user, groups := kubetest.ServiceAccount("bridgehead-verify", "bridgehead-verify")
	reporter, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 12, 2, 2, 0, 0, 0, time.UTC)
	pass := func(name, target string) verify.Check {
		return verify.Check{Name: name, Target: target, Result: verify.Pass}
	}
	rep := func(checks ...verify.Check) *verify.Report { return &verify.Report{Checks: checks} }
	publish := func(rec verify.Record) {
		t.Helper()
		start := time.Now()
		if err := Publish(ctx, reporter, DefaultNamespace, rec); err != nil {
			t.Fatal(err)
		}
		t.Logf("published %s/%s in %v", rec.Site, rec.Node, time.Since(start).Round(time.Millisecond))
	}
	// a1 first fails its callback, then passes: the update replaces it.
	publish(verify.NewRecord("site-a", "a1", "pod", now.Add(-time.Minute), rep(pass("pod", "site-b/10.245.1.10"),
		verify.Check{Name: "callback", Target: "10.224.0.4:8131 -> 10.224.0.11:10250", Result: verify.Fail, Detail: "relay refused"})))
	publish(verify.NewRecord("site-a", "a1", "pod", now.Add(-20*time.Second), rep(pass("pod", "site-b/10.245.1.10"), pass("callback", "10.224.0.4:8131 -> 10.224.0.11:10250"))))
	publish(verify.NewRecord("site-b", "b1", "node", now.Add(-10*time.Second), rep(pass("pod", "site-a/10.244.1.10"),
		verify.Check{Name: "dns", Target: "kubernetes.default.svc.cluster.local @10.96.0.10:53", Result: verify.Fail, Detail: "no answer in 2s"})))
	publish(verify.NewRecord("site-b", "b2", "node", now.Add(-3*time.Hour), rep(pass("pod", "site-a/10.244.1.10"))))
	bad := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "verify-broken", Namespace: DefaultNamespace, Labels: map[string]string{ReportLabel: "true"}},
		Data: map[string]string{DataKey: `{"site":"x"}`}}
	if _, err := admin.CoreV1().ConfigMaps(DefaultNamespace).Create(ctx, bad, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	start := time.Now()
	recs, problems, err := Collect(ctx, admin, DefaultNamespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("collected %d reports in %v", len(recs), time.Since(start).Round(time.Millisecond))
	if len(problems) != 1 || !strings.Contains(problems[0].Error(), "ConfigMap bridgehead-verify/verify-broken key report.json: report: node: is required") {
		t.Errorf("problems %v", problems)
	}
	m := verify.BuildMatrix(recs, verify.MatrixOptions{Sites: []string{"site-a", "site-b", "site-c"}, MaxAge: time.Hour, Now: now})
	var out bytes.Buffer
	m.WriteTable(&out)
	t.Logf("matrix:\n%s", out.String())
	want := `SITE    NODE  ON    AGE             POD   CALLBACK  DNS
site-a  a1    pod   20s             PASS  PASS      -
site-b  b1    node  10s             PASS  -         FAIL
site-b  b2    node  3h0m0s (stale)  PASS  -         -
site-c  -     -     no report       -     -         -

  site-b/b1 dns FAIL: kubernetes.default.svc.cluster.local @10.96.0.10:53: no answer in 2s

3 reports: 1 failing, 1 stale; sites without a report: 1
`
	if out.String() != want {
		t.Errorf("matrix:\n%s\nwant:\n%s", out.String(), want)
	}
	cm, err := admin.CoreV1().ConfigMaps(DefaultNamespace).Get(ctx, Name("site-a", "a1"), metav1.GetOptions{})
	if err != nil || cm.Labels[SiteLabel] != "site-a" || cm.Labels[NodeLabel] != "a1" {
		t.Errorf("a1's ConfigMap: %v %v", cm.Labels, err)
	}
}
