package deploy

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// kubectl runs kubectl against env with stdin; it fails t on error.
func kubectl(t *testing.T, env *kubetest.Env, stdin []byte, args ...string) string {
	t.Helper()
	bin, err := exec.LookPath("kubectl")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("kubectl: %v", err)
		}
		t.Skipf("kubectl: %v", err)
	}
	cmd := exec.Command(bin, append([]string{"--kubeconfig", env.Kubeconfig}, args...)...)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("kubectl %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// applyDeploy runs `kubectl apply -k kubernetes` and waits for the CRDs.
func applyDeploy(t *testing.T, env *kubetest.Env) string {
	t.Helper()
	start := time.Now()
	out := kubectl(t, env, nil, "apply", "-k", "kubernetes")
	t.Logf("kubectl apply -k deploy/kubernetes: %v", time.Since(start).Round(time.Millisecond))
	env.WaitCRDs(t, "kubernetes/crds")
	return out
}

// TestDeployKustomization applies deploy/kubernetes to a real API server
// with kubectl and checks what it made: the CRDs, the namespaces, the
// controller's ServiceAccount, RBAC, Deployment of 2 and PDB, and the
// gateways' read access. A second apply changes nothing.
func TestDeployKustomization(t *testing.T) {
	env := kubetest.Start(t)
	applyDeploy(t, env)
	cs := env.Clientset(t)
	ctx := context.Background()

	for _, ns := range []string{"bridgehead-system", kube.GatewayNamespace} {
		if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
			t.Errorf("namespace %s: %v", ns, err)
		}
	}
	if _, err := cs.CoreV1().ServiceAccounts("bridgehead-system").Get(ctx, "bridgehead-controller", metav1.GetOptions{}); err != nil {
		t.Errorf("controller ServiceAccount: %v", err)
	}
	d, err := cs.AppsV1().Deployments("bridgehead-system").Get(ctx, "bridgehead-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("controller Deployment: %v", err)
	}
	checkDeployment(t, d)
	pdb, err := cs.PolicyV1().PodDisruptionBudgets("bridgehead-system").Get(ctx, "bridgehead-controller", metav1.GetOptions{})
	if err != nil || pdb.Spec.MinAvailable == nil || pdb.Spec.MinAvailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget: %v %v", pdb, err)
	}
	for _, name := range []string{"bridgehead-controller", "bridgehead-gateway-read", "bridgehead-node"} {
		if _, err := cs.RbacV1().ClusterRoles().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ClusterRole %s: %v", name, err)
		}
		if _, err := cs.RbacV1().ClusterRoleBindings().Get(ctx, name, metav1.GetOptions{}); err != nil {
			t.Errorf("ClusterRoleBinding %s: %v", name, err)
		}
	}
	checkNodeDaemonSet(t, cs)
	for _, ns := range []string{"bridgehead-system", "default"} {
		if _, err := cs.RbacV1().RoleBindings(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/part-of=bridgehead"}); err != nil {
			t.Errorf("RoleBindings in %s: %v", ns, err)
		}
	}
	if out := kubectl(t, env, nil, "get", "sites,gateways"); !strings.Contains(out, "No resources found") {
		t.Errorf("kubectl get sites,gateways: %s", out)
	}
	// A second apply changes no object (kubectl 1.32 may still say
	// "configured" for the PodDisruptionBudget: its patch is a no-op).
	versions := func() string {
		return kubectl(t, env, nil, "get", "-k", "kubernetes", "-o",
			`jsonpath={range .items[*]}{.kind}/{.metadata.name}={.metadata.resourceVersion}{"\n"}{end}`)
	}
	before := versions()
	kubectl(t, env, nil, "apply", "-k", "kubernetes")
	// As many objects as the kustomization renders (a top-level kind: line each).
	want := 0
	for _, l := range strings.Split(kubectl(t, env, nil, "kustomize", "kubernetes"), "\n") {
		if strings.HasPrefix(l, "kind: ") {
			want++
		}
	}
	if after := versions(); after != before || strings.Count(before, "\n") != want {
		t.Errorf("a second apply changed objects, or not the %d the kustomization renders:\nbefore:\n%s\nafter:\n%s", want, before, after)
	}
}

// checkNodeDaemonSet: the node agent runs in Kubernetes mode with its
// own ServiceAccount, whose token is mounted.
func checkNodeDaemonSet(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	ctx := context.Background()
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, "bridgehead-node", metav1.GetOptions{}); err != nil {
		t.Errorf("node agent ServiceAccount: %v", err)
	}
	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, "bridgehead-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node agent DaemonSet: %v", err)
	}
	spec := ds.Spec.Template.Spec
	if spec.ServiceAccountName != "bridgehead-node" || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("node agent serviceAccountName %q, automountServiceAccountToken %v", spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	if !spec.HostNetwork {
		t.Error("node agent is not on the host network")
	}
	args := strings.Join(spec.Containers[0].Args, " ")
	if !strings.HasPrefix(args, "node --kubernetes ") || !strings.Contains(args, "--node=$(NODE_NAME)") {
		t.Errorf("node agent args %q, want node --kubernetes ... --node=$(NODE_NAME)", args)
	}
	if c := spec.Containers[0]; c.Image != deployImage {
		t.Errorf("node agent image %q, want %q", c.Image, deployImage)
	}
	// Nothing rendered by hand: no volume from a ConfigMap the operator
	// would have to make.
	for _, v := range spec.Volumes {
		if v.ConfigMap != nil {
			t.Errorf("node agent mounts ConfigMap %q", v.ConfigMap.Name)
		}
	}
}

// deployImage is the one image every manifest runs, as kustomization.yaml
// names it.
const deployImage = "ghcr.io/bridgehead/bridgehead:dev"

func checkDeployment(t *testing.T, d *appsv1.Deployment) {
	t.Helper()
	if d.Spec.Replicas == nil || *d.Spec.Replicas != 2 {
		t.Errorf("replicas %v, want 2", d.Spec.Replicas)
	}
	if d.Spec.Template.Spec.ServiceAccountName != "bridgehead-controller" {
		t.Errorf("serviceAccountName %q", d.Spec.Template.Spec.ServiceAccountName)
	}
	c := d.Spec.Template.Spec.Containers[0]
	want := "controller --namespace=bridgehead-system --metrics-listen=:9643 --leader-elect=true --lease-duration=15s --renew-deadline=10s --retry-period=500ms"
	if got := strings.Join(c.Args, " "); got != want || len(c.Command) != 0 {
		t.Errorf("command %q args %q, want the image's entrypoint with %q", c.Command, got, want)
	}
	if c.Image != deployImage {
		t.Errorf("image %q, want %q", c.Image, deployImage)
	}
	// Bootstrap: the controller runs before any CNI exists.
	spec := d.Spec.Template.Spec
	if !spec.HostNetwork {
		t.Error("the controller is not on the host network: on a cluster without a CNI it never gets a sandbox")
	}
	tolerated := map[string]bool{}
	for _, tol := range spec.Tolerations {
		tolerated[tol.Key] = true
	}
	for _, key := range []string{"node.kubernetes.io/not-ready", "node.kubernetes.io/network-unavailable", "CriticalAddonsOnly"} {
		if !tolerated[key] {
			t.Errorf("the controller does not tolerate %s: on a cluster without a CNI it is never scheduled", key)
		}
	}
	if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" {
		t.Errorf("probes %+v %+v", c.LivenessProbe, c.ReadinessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() {
		t.Errorf("resource requests %v", c.Resources.Requests)
	}
}

// TestGatewayCredentials: with the credential of gateway east.gw1 (its
// ServiceAccount, by impersonation), updating its own Gateway's status
// succeeds; updating another Gateway's status, its own spec, a Site, or
// creating a Gateway (claiming a name) or reading Secrets is refused
// with 403. The controller's credential gets what it needs and no more.
func TestGatewayCredentials(t *testing.T) {
	env := kubetest.Start(t)
	applyDeploy(t, env)
	ctx := context.Background()
	var rbac bytes.Buffer
	if err := kube.WriteObjects(&rbac, append(kube.GatewayRBAC("east.gw1"), kube.GatewayRBAC("west.gw1")...)); err != nil {
		t.Fatal(err)
	}
	kubectl(t, env, rbac.Bytes(), "apply", "-f", "-")

	admin := dyn(t, env.Config)
	create := func(res string, obj runtime.Object, kind string) {
		t.Helper()
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatal(err)
		}
		u := &unstructured.Unstructured{Object: m}
		u.SetAPIVersion(v1.SchemeGroupVersion.String())
		u.SetKind(kind)
		if _, err := admin.Resource(v1.SchemeGroupVersion.WithResource(res)).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create %s: %v", kind, err)
		}
	}
	for _, s := range []string{"east", "west"} {
		create(v1.SitesResource, &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: s}, Spec: v1.SiteSpec{NodeCIDRs: []v1.CIDR{"10.1.0.0/16"}}}, "Site")
	}
	for _, g := range []struct{ name, site string }{{"east.gw1", "east"}, {"east.gw2", "east"}, {"west.gw1", "west"}} {
		create(v1.GatewaysResource, &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: g.name}, Spec: v1.GatewaySpec{Site: g.site, Address: "10.1.0.5"}}, "Gateway")
	}

	user, groups := kubetest.ServiceAccount(kube.GatewayNamespace, "east.gw1")
	gwCfg := env.Impersonate(user, groups...)
	gw := dyn(t, gwCfg)
	sites := gw.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource))
	gws := gw.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource))
	statusPatch := []byte(`{"status":{"publicKey":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=","endpoint":"203.0.113.5:51820","remoteGateways":1,"remoteGatewaysUp":1}}`)

	// Allowed: read the catalog, write its own status.
	if _, err := sites.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("gateway lists Sites: %v", err)
	}
	if _, err := gws.Patch(ctx, "east.gw1", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("gateway patches its own status: %v", err)
	}
	own, err := gws.Get(ctx, "east.gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ep, _, _ := unstructured.NestedString(own.Object, "status", "endpoint"); ep != "203.0.113.5:51820" {
		t.Errorf("own status endpoint %q", ep)
	}
	if _, err := gws.UpdateStatus(ctx, own, metav1.UpdateOptions{}); err != nil {
		t.Errorf("gateway updates its own status: %v", err)
	}

	// Allowed: watch the published catalog (kubernetes.follow).
	gwCS, err := kubernetes.NewForConfig(gwCfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").List(ctx, metav1.ListOptions{LabelSelector: "bridgehead.io/catalog"}); err != nil {
		t.Errorf("gateway lists the catalog's ConfigMaps: %v", err)
	}
	if w, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").Watch(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("gateway watches the catalog's ConfigMaps: %v", err)
	} else {
		w.Stop()
	}

	// Refused, each with 403.
	specPatch := []byte(`{"spec":{"endpoint":"198.51.100.66:51820"}}`)
	refusals := []struct {
		name string
		do   func() error
	}{
		{"another gateway's status (same site)", func() error {
			_, err := gws.Patch(ctx, "east.gw2", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
			return err
		}},
		{"another site's gateway's status", func() error {
			_, err := gws.Patch(ctx, "west.gw1", types.MergePatchType, statusPatch, metav1.PatchOptions{}, "status")
			return err
		}},
		{"its own spec", func() error {
			_, err := gws.Patch(ctx, "east.gw1", types.MergePatchType, specPatch, metav1.PatchOptions{})
			return err
		}},
		{"its own spec by update", func() error {
			cur, err := gws.Get(ctx, "east.gw1", metav1.GetOptions{})
			if err != nil {
				return err
			}
			_ = unstructured.SetNestedField(cur.Object, "west", "spec", "site")
			_, err = gws.Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"a site's spec", func() error {
			_, err := sites.Patch(ctx, "east", types.MergePatchType, []byte(`{"spec":{"podCIDRs":["10.200.0.0/16"]}}`), metav1.PatchOptions{})
			return err
		}},
		{"a site's status", func() error {
			_, err := sites.Patch(ctx, "east", types.MergePatchType, []byte(`{"status":{"gatewaysReady":9}}`), metav1.PatchOptions{}, "status")
			return err
		}},
		{"creating a gateway (claiming a site)", func() error {
			u := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Gateway",
				"metadata": map[string]any{"name": "west.gw9"}, "spec": map[string]any{"site": "west", "address": "10.1.0.9"},
			}}
			_, err := gws.Create(ctx, u, metav1.CreateOptions{})
			return err
		}},
		{"deleting its own gateway", func() error {
			return gws.Delete(ctx, "east.gw1", metav1.DeleteOptions{})
		}},
		{"reading secrets (other gateways' tokens)", func() error {
			cs, err := kubernetes.NewForConfig(gwCfg)
			if err != nil {
				return err
			}
			_, err = cs.CoreV1().Secrets(kube.GatewayNamespace).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"ConfigMaps outside the catalog's namespace", func() error {
			_, err := gwCS.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"writing the catalog", func() error {
			_, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-catalog"}}, metav1.CreateOptions{})
			return err
		}},
		{"a token for another gateway's ServiceAccount", func() error {
			cs, err := kubernetes.NewForConfig(gwCfg)
			if err != nil {
				return err
			}
			_, err = cs.CoreV1().ServiceAccounts(kube.GatewayNamespace).CreateToken(ctx, "west.gw1", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, r := range refusals {
		if err := r.do(); !apierrors.IsForbidden(err) {
			t.Errorf("gateway east.gw1, %s: %v, want 403 Forbidden", r.name, err)
		}
	}
	after, err := dyn(t, env.Config).Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).Get(ctx, "east.gw2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, found, _ := unstructured.NestedString(after.Object, "status", "endpoint"); found {
		t.Errorf("east.gw2's status was written: %v", after.Object["status"])
	}

	checkControllerCredential(t, env)
}

// TestNodeAgentCredential: the node agent's ServiceAccount
// (kube-system/bridgehead-node) may get, list and watch Nodes, patch a
// Node's status (its BridgeheadNodeNetwork condition) and record Events,
// and may not patch, update or delete a Node, replace a Node's status,
// read Sites or Gateways, or read Secrets.
func TestNodeAgentCredential(t *testing.T) {
	env := kubetest.Start(t)
	applyDeploy(t, env)
	ctx := context.Background()
	admin := env.Clientset(t)
	if _, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bhk-n1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, groups := kubetest.ServiceAccount("kube-system", "bridgehead-node")
	cfg := env.Impersonate(user, groups...)
	// As the pod's token on bhk-n1 (node-admission.yaml binds the agent's
	// writes to the node its token names).
	cfg.Impersonate.Extra = map[string][]string{"authentication.kubernetes.io/node-name": {"bhk-n1"}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("node agent lists Nodes: %v", err)
	}
	for _, ns := range []string{"bridgehead-system"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("node agent lists the catalog's ConfigMaps in %s: %v", ns, err)
		}
	}
	self, err := cs.CoreV1().Nodes().Get(ctx, "bhk-n1", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("node agent gets its Node: %v", err)
	}
	w, err := cs.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Errorf("node agent watches Nodes: %v", err)
	} else {
		w.Stop()
	}
	ev := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bhk-n1.ev", Namespace: "default"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "bhk-n1"}, Reason: "BridgeheadNodeNotConfigured", Message: "m"}
	if _, err := cs.CoreV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("node agent records an Event: %v", err)
	}
	if _, err := cs.CoreV1().Events("default").Patch(ctx, "bhk-n1.ev", types.MergePatchType, []byte(`{"count":2}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("node agent patches its Event: %v", err)
	}

	cond := `{"status":{"conditions":[{"type":"BridgeheadNodeNetwork","status":"True","reason":"Configured","message":"m","lastHeartbeatTime":"2026-12-02T01:00:00Z","lastTransitionTime":"2026-12-02T01:00:00Z"}]}}`
	if _, err := cs.CoreV1().Nodes().PatchStatus(ctx, "bhk-n1", []byte(cond)); err != nil {
		t.Errorf("node agent patches its Node's condition: %v", err)
	}

	d := dyn(t, cfg)
	refused := map[string]error{}
	_, refused["update a Node's status"] = cs.CoreV1().Nodes().UpdateStatus(ctx, self, metav1.UpdateOptions{})
	_, refused["patch a Node's labels"] = cs.CoreV1().Nodes().Patch(ctx, "bhk-n1", types.MergePatchType, []byte(`{"metadata":{"labels":{"bridgehead.io/site":"east"}}}`), metav1.PatchOptions{})
	_, refused["patch a Node's pod range"] = cs.CoreV1().Nodes().Patch(ctx, "bhk-n1", types.MergePatchType, []byte(`{"spec":{"podCIDRs":["10.101.1.0/24"],"podCIDR":"10.101.1.0/24"}}`), metav1.PatchOptions{})
	_, refused["update a Node"] = cs.CoreV1().Nodes().Update(ctx, self, metav1.UpdateOptions{})
	refused["delete a Node"] = cs.CoreV1().Nodes().Delete(ctx, "bhk-n1", metav1.DeleteOptions{})
	_, refused["list Sites"] = d.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource)).List(ctx, metav1.ListOptions{})
	_, refused["create a Site"] = d.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource)).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Site", "metadata": map[string]any{"name": "rogue"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
	_, refused["list Gateways"] = d.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).List(ctx, metav1.ListOptions{})
	_, refused["list Secrets"] = cs.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
	_, refused["list ConfigMaps in kube-system"] = cs.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
	_, refused["write the catalog"] = cs.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-catalog"}}, metav1.CreateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("node agent: %s: %v, want 403 Forbidden", what, err)
		}
	}

}

// checkControllerCredential: the controller's ServiceAccount may patch
// Nodes, hold its Lease and publish the catalog ConfigMaps in its
// namespace, and may not delete Nodes, read Secrets, write Gateway status
// or write Leases, ConfigMaps or Events elsewhere. The controller itself
// runs under this credential in controller/rbac_kube_test.go.
func checkControllerCredential(t *testing.T, env *kubetest.Env) {
	t.Helper()
	ctx := context.Background()
	admin := env.Clientset(t)
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bhk-node1"}}
	if _, err := admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	user, groups := kubetest.ServiceAccount("bridgehead-system", "bridgehead-controller")
	cs, err := kubernetes.NewForConfig(env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Nodes().Patch(ctx, "bhk-node1", types.MergePatchType, []byte(`{"metadata":{"labels":{"bridgehead.io/site":"east"}},"spec":{"podCIDRs":["10.101.1.0/24"],"podCIDR":"10.101.1.0/24"}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("controller patches a Node: %v", err)
	}
	lease := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-controller"}}
	if _, err := cs.CoordinationV1().Leases("bridgehead-system").Create(ctx, lease, metav1.CreateOptions{}); err != nil {
		t.Errorf("controller creates its Lease: %v", err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-catalog"}, Data: map[string]string{"sites.yaml": "sites: []\n"}}
	if _, err := cs.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Errorf("controller publishes the catalog: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps("bridgehead-system").List(ctx, metav1.ListOptions{LabelSelector: "bridgehead.io/catalog"}); err != nil {
		t.Errorf("controller lists the catalog: %v", err)
	}
	if err := cs.CoreV1().ConfigMaps("bridgehead-system").Delete(ctx, "bridgehead-catalog", metav1.DeleteOptions{}); err != nil {
		t.Errorf("controller deletes a stale catalog slice: %v", err)
	}
	ev := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bhk-ev", Namespace: "default"}, EventTime: metav1.NowMicro(),
		Regarding: corev1.ObjectReference{Kind: "Node", Name: "bhk-node1"}, Reason: "Test", Action: "Assign", Type: corev1.EventTypeWarning,
		ReportingController: "bridgehead-controller", ReportingInstance: "bhk", Note: "m"}
	if _, err := cs.EventsV1().Events("default").Create(ctx, ev, metav1.CreateOptions{}); err != nil {
		t.Errorf("controller records an Event in default: %v", err)
	}
	refused := map[string]error{}
	_, refused["a core/v1 Event (it records events.k8s.io)"] = cs.CoreV1().Events("default").Create(ctx,
		&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "bhk-ev1"}, InvolvedObject: corev1.ObjectReference{Kind: "Node", Name: "bhk-node1"}}, metav1.CreateOptions{})
	_, refused["an Event in its own namespace"] = cs.EventsV1().Events("bridgehead-system").Create(ctx, ev, metav1.CreateOptions{})
	_, refused["a Gateway's status"] = dyn(t, env.Impersonate(user, groups...)).Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)).Patch(ctx,
		"east.gw1", types.MergePatchType, []byte(`{"status":{"endpoint":"198.51.100.66:51820"}}`), metav1.PatchOptions{}, "status")
	refused["delete a Node"] = cs.CoreV1().Nodes().Delete(ctx, "bhk-node1", metav1.DeleteOptions{})
	_, refused["list Secrets"] = cs.CoreV1().Secrets("bridgehead-system").List(ctx, metav1.ListOptions{})
	_, refused["a Lease in default"] = cs.CoordinationV1().Leases("default").Create(ctx, lease, metav1.CreateOptions{})
	_, refused["a ConfigMap in default"] = cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{})
	_, refused["create a Site"] = dyn(t, env.Impersonate(user, groups...)).Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource)).Create(ctx,
		&unstructured.Unstructured{Object: map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Site", "metadata": map[string]any{"name": "rogue"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
	for what, err := range refused {
		if !apierrors.IsForbidden(err) {
			t.Errorf("controller: %s: %v, want 403 Forbidden", what, err)
		}
	}
}

func dyn(t *testing.T, c *rest.Config) *dynamic.DynamicClient {
	t.Helper()
	d, err := dynamic.NewForConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	return d
}
