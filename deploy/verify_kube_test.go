package deploy

import (
	"context"
	"os"
	"slices"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube/catalog"
	"github.com/bridgehead/bridgehead/verify/kubepeer"
)

// verifySites is a two-site catalog as the controller publishes it.
const verifySites = `sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.224.0.4, endpoint: "198.18.0.1:51820", publicKey: "O3p4RWm1nAfeUTxEB8MOtm6fW04tU0PsRMcd5AnzTGY="}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.4, endpoint: "198.18.0.2:51820", publicKey: "4ysWvyeBb5vWLXUMWKqoCG+hvDFXTr1Yu+4nMyvAkk0="}
`

// TestVerifyJob: the verify Job of deploy/kubernetes, under the
// credential verify-rbac.yaml gives it. Its pods pass the restricted Pod
// Security level of their namespace as they are; with its account a pod
// reads the sites from the published catalog and finds the other pods of
// its run; it is refused everything else.
func TestVerifyJob(t *testing.T) {
	env := kubetest.Start(t)
	applyDeploy(t, env)
	ctx := context.Background()
	admin := env.Clientset(t)

	cfg, err := config.ParseSites("catalog", []byte(verifySites))
	if err != nil {
		t.Fatal(err)
	}
	cms, err := catalog.Render(cfg.Sites, catalog.Namespace("bridgehead-system"))
	if err != nil {
		t.Fatal(err)
	}
	for _, cm := range cms {
		if _, err := admin.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other", Namespace: "bridgehead-system"}}
	if _, err := admin.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	// The Job's pods, as the Job controller makes them (two, one per
	// site), are admitted by the namespace's restricted level.
	b, err := os.ReadFile("kubernetes/verify-job.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var job batchv1.Job
	if err := sigyaml.UnmarshalStrict(b, &job); err != nil {
		t.Fatal(err)
	}
	const uid = "0b6c2f6e-5f0d-4b38-9a57-5d1c2d6c1a01"
	for i, p := range []struct{ name, node, ip, hostIP string }{
		{"bridgehead-verify-a", "a1", "10.244.1.5", "10.224.0.11"},
		{"bridgehead-verify-b", "b1", "10.245.3.7", "192.168.50.11"},
	} {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.name, Namespace: job.Namespace, Labels: map[string]string{"batch.kubernetes.io/controller-uid": uid}},
			Spec: *job.Spec.Template.Spec.DeepCopy()}
		for k, v := range job.Spec.Template.Labels {
			pod.Labels[k] = v
		}
		pod.Spec.NodeName = p.node
		created, err := admin.CoreV1().Pods(job.Namespace).Create(ctx, pod, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("pod %d of the verify Job: %v", i, err)
		}
		created.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: p.ip, HostIP: p.hostIP}
		if _, err := admin.CoreV1().Pods(job.Namespace).UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// A privileged pod would be refused there.
	bad := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "root", Namespace: job.Namespace}, Spec: *job.Spec.Template.Spec.DeepCopy()}
	bad.Spec.SecurityContext.RunAsNonRoot, bad.Spec.SecurityContext.RunAsUser = nil, new(int64)
	if _, err := admin.CoreV1().Pods(job.Namespace).Create(ctx, bad, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); !apierrors.IsForbidden(err) {
		t.Errorf("a root pod in %s: %v, want refused by Pod Security", job.Namespace, err)
	}

	user, groups := kubetest.ServiceAccount(job.Namespace, job.Spec.Template.Spec.ServiceAccountName)
	cs, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	sites, err := kubepeer.Sites(ctx, cs, "bridgehead-system")
	if err != nil || len(sites) != 2 {
		t.Fatalf("the sites from the published catalog: %v, %v", sites, err)
	}
	found, err := kubepeer.Peers(ctx, cs, job.Namespace, "batch.kubernetes.io/controller-uid="+uid, "bridgehead-verify-a", "site-a", sites, 10*time.Second)
	if err != nil || len(found.Missing) != 0 || len(found.Peers) != 1 || found.Peers[0].Site != "site-b" || found.Peers[0].Node != "b1" {
		t.Errorf("the peers of bridgehead-verify-a: %v, %v; want bridgehead-verify-b in site-b", found, err)
	}
	report := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "verify-site-a-a1", Namespace: job.Namespace}, Data: map[string]string{"report.json": "{}"}}
	if _, err := cs.CoreV1().ConfigMaps(job.Namespace).Create(ctx, report, metav1.CreateOptions{}); err != nil {
		t.Errorf("verify creates its report: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(job.Namespace).Update(ctx, report, metav1.UpdateOptions{}); err != nil {
		t.Errorf("verify updates its report: %v", err)
	}

	refused := map[string]error{}
	_, refused["get another ConfigMap of bridgehead-system"] = cs.CoreV1().ConfigMaps("bridgehead-system").Get(ctx, "other", metav1.GetOptions{})
	_, refused["list ConfigMaps of bridgehead-system"] = cs.CoreV1().ConfigMaps("bridgehead-system").List(ctx, metav1.ListOptions{})
	_, refused["update the catalog"] = cs.CoreV1().ConfigMaps("bridgehead-system").Update(ctx, cms[0], metav1.UpdateOptions{})
	_, refused["get a report"] = cs.CoreV1().ConfigMaps(job.Namespace).Get(ctx, report.Name, metav1.GetOptions{})
	_, refused["list the reports"] = cs.CoreV1().ConfigMaps(job.Namespace).List(ctx, metav1.ListOptions{})
	refused["delete a report"] = cs.CoreV1().ConfigMaps(job.Namespace).Delete(ctx, report.Name, metav1.DeleteOptions{})
	_, refused["create a ConfigMap in kube-system"] = cs.CoreV1().ConfigMaps("kube-system").Create(ctx, report, metav1.CreateOptions{})
	_, refused["list Secrets in its namespace"] = cs.CoreV1().Secrets(job.Namespace).List(ctx, metav1.ListOptions{})
	_, refused["list pods in kube-system"] = cs.CoreV1().Pods("kube-system").List(ctx, metav1.ListOptions{})
	_, refused["get a pod"] = cs.CoreV1().Pods(job.Namespace).Get(ctx, "bridgehead-verify-b", metav1.GetOptions{})
	_, refused["list Nodes"] = cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("verify: %s: %v, want 403 Forbidden", what, err)
		}
	}
	if !slices.ContainsFunc(cms, func(cm *corev1.ConfigMap) bool { return cm.Name == catalog.BaseName }) {
		t.Fatalf("Render made no %s", catalog.BaseName)
	}
}
