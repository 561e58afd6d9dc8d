package deploy

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/nodeagent"
	"github.com/bridgehead/bridgehead/nodeagent/kubenode"
)

// nodeAdmission holds the Node admission policies (node agent, kubelet).
const nodeAdmission = "kubernetes/node-admission.yaml"

// waitRefused retries do until an admission policy refuses it (the API
// server loads policies, and RBAC objects, through informers: a policy
// created a moment ago is in force once it refuses, and since admission
// comes after authorization, the identity's RBAC is in force then too),
// or fails t after 30 s.
func waitRefused(t *testing.T, what string, do func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := do()
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v, want 403 Forbidden once the admission policy is loaded", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestNodeAgentVAP: the node agent's credential, with the token its pod
// gets (bound to the pod, so to its node), writes its own Node's
// BridgeheadNodeNetwork condition (through the agent's own
// ConditionReporter) and nothing else: not another Node's condition, not
// its own Node's addresses, other conditions, capacity, labels or
// annotations (a nodes/status write can carry metadata), and a token not
// bound to a pod writes nothing.
func TestNodeAgentVAP(t *testing.T) {
	env := kubetest.Start(t)
	env.ApplyFiles(t, "kubernetes/namespace.yaml", "kubernetes/node-rbac.yaml", nodeAdmission)
	admin := env.Clientset(t)
	ctx := context.Background()
	for _, n := range []struct{ name, ip string }{{"vap-x", "10.10.0.4"}, {"vap-y", "10.10.0.5"}} {
		node, err := admin.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.name,
			Labels: map[string]string{"bridgehead.io/site": "a"}}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		node.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: n.ip}}
		node.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, Reason: "KubeletReady",
			LastHeartbeatTime: metav1.Now(), LastTransitionTime: metav1.Now()}}
		if _, err := admin.CoreV1().Nodes().UpdateStatus(ctx, node, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	agentX := kubernetes.NewForConfigOrDie(env.PodServiceAccountConfig(t, "kube-system", "bridgehead-node", "bridgehead-node-x", "vap-x"))
	cond := func(node string) []byte {
		return []byte(`{"status":{"conditions":[{"type":"BridgeheadNodeNetwork","status":"True","reason":"Configured","message":"m",` +
			`"lastHeartbeatTime":"2026-12-06T01:00:00Z","lastTransitionTime":"2026-12-06T01:00:00Z"}]}}`)
	}
	waitRefused(t, "agent on vap-x patches vap-y's condition", func() error {
		_, err := agentX.CoreV1().Nodes().PatchStatus(ctx, "vap-y", cond("vap-y"))
		return err
	})

	// Its own condition, written by the agent's own reporter.
	r := kubenode.NewConditionReporter(agentX, "vap-x", slog.New(slog.DiscardHandler), nil)
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true})
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("the agent on vap-x writes its own condition: %v", err)
	}
	r.Report(nodeagent.Status{Configured: true, CNIWritten: true, Errors: []nodeagent.StageError{{Stage: "routes", Err: "x"}}})
	if err := r.Flush(ctx); err != nil {
		t.Fatalf("the agent on vap-x changes its own condition: %v", err)
	}
	x, err := admin.CoreV1().Nodes().Get(ctx, "vap-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got *corev1.NodeCondition
	for i := range x.Status.Conditions {
		if x.Status.Conditions[i].Type == kubenode.ConditionType {
			got = &x.Status.Conditions[i]
		}
	}
	if got == nil || got.Reason != kubenode.ConditionRoutesFailed || len(x.Status.Conditions) != 2 {
		t.Errorf("vap-x's conditions %+v: want Ready and %s=False %s", x.Status.Conditions, kubenode.ConditionType, kubenode.ConditionRoutesFailed)
	}

	unbound := kubernetes.NewForConfigOrDie(env.ServiceAccountConfig(t, "kube-system", "bridgehead-node"))
	status := func(body string) func() error {
		return func() error { _, err := agentX.CoreV1().Nodes().PatchStatus(ctx, "vap-x", []byte(body)); return err }
	}
	for _, r := range []struct {
		what, want string
		do         func() error
	}{
		{"another Node's condition", "may not write Node vap-y", func() error {
			_, err := agentX.CoreV1().Nodes().PatchStatus(ctx, "vap-y", cond("vap-y"))
			return err
		}},
		{"its own condition with a token not bound to a pod", "names no node", func() error {
			_, err := unbound.CoreV1().Nodes().PatchStatus(ctx, "vap-x", cond("vap-x"))
			return err
		}},
		{"its own Node's status.addresses", "status.addresses", status(`{"status":{"addresses":[{"type":"InternalIP","address":"10.10.0.5"}]}}`)},
		{"its own Node's addresses beside its condition", "status.addresses", status(`{"status":{"addresses":[{"type":"ExternalIP","address":"192.0.2.9"}],` +
			`"conditions":[{"type":"BridgeheadNodeNetwork","status":"True","reason":"Configured","message":"m"}]}}`)},
		{"its own Node's Ready condition", "only its own condition", status(`{"status":{"conditions":[{"type":"Ready","status":"False","reason":"X"}]}}`)},
		{"its own Node's capacity", "status.capacity", status(`{"status":{"capacity":{"pods":"500"}}}`)},
		{"its own Node's site label, through the status", "metadata.labels", status(`{"metadata":{"labels":{"bridgehead.io/site":"b"}}}`)},
		{"its own Node's annotations, through the status", "metadata.annotations", status(`{"metadata":{"annotations":{"bridgehead.io/pod-cidrs":"10.100.9.0/24"}}}`)},
	} {
		err := r.do()
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), r.want) {
			t.Errorf("node agent on vap-x, %s: %v, want 403 Forbidden saying %q", r.what, err, r.want)
		}
	}
	x2, err := admin.CoreV1().Nodes().Get(ctx, "vap-x", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(x2.Status.Addresses, x.Status.Addresses) || x2.Labels["bridgehead.io/site"] != "a" || len(x2.Annotations) != 0 {
		t.Errorf("vap-x changed: addresses %v, labels %v, annotations %v", x2.Status.Addresses, x2.Labels, x2.Annotations)
	}
	// Others are not bound by it: the admin writes any status.
	if _, err := admin.CoreV1().Nodes().PatchStatus(ctx, "vap-y", []byte(`{"status":{"addresses":[{"type":"ExternalIP","address":"192.0.2.10"}]}}`)); err != nil {
		t.Errorf("admin patches vap-y's addresses: %v", err)
	}
}

// TestNodeAgentVAPStatusFields: the node agent's policy compares every
// field of NodeStatus but conditions one by one (CEL cannot compare a
// status less one field); a field Kubernetes adds would be writable until
// it is listed. This fails when k8s.io/api's NodeStatus has a field the
// policy does not compare.
func TestNodeAgentVAPStatusFields(t *testing.T) {
	p := readPolicy(t, "bridgehead-node-agent-own-condition")
	var exprs strings.Builder
	for _, v := range p.Spec.Validations {
		exprs.WriteString(v.Expression + "\n")
	}
	st := reflect.TypeOf(corev1.NodeStatus{})
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name == "conditions" {
			continue
		}
		if !strings.Contains(exprs.String(), "object.status."+name+" == oldObject.status."+name) {
			t.Errorf("NodeStatus.%s (json %q): the policy does not compare it, so the node agent could write it", st.Field(i).Name, name)
		}
	}
	for _, f := range []string{"labels", "annotations", "finalizers", "ownerReferences"} {
		if !strings.Contains(exprs.String(), "object.metadata."+f+" == oldObject.metadata."+f) {
			t.Errorf("metadata.%s: not compared", f)
		}
	}
}

// readPolicy finds a ValidatingAdmissionPolicy by name in node-admission.yaml.
func readPolicy(t *testing.T, name string) *admissionregistrationv1.ValidatingAdmissionPolicy {
	t.Helper()
	f, err := os.Open(nodeAdmission)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dec := utilyaml.NewYAMLOrJSONDecoder(f, 4096)
	for {
		var p admissionregistrationv1.ValidatingAdmissionPolicy
		if err := dec.Decode(&p); err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			t.Fatalf("%s: %v", nodeAdmission, err)
		}
		if p.Kind == "ValidatingAdmissionPolicy" && p.Name == name {
			return &p
		}
	}
	t.Fatalf("%s: no ValidatingAdmissionPolicy %s", nodeAdmission, name)
	return nil
}

// TestKubeletVAP: a node identity (user system:node:<name> in group
// system:nodes, with the permissions the Node authorizer gives a kubelet)
// may not put a bridgehead.io/ label or annotation on a Node, at
// registration (--node-labels) or later, on the Node or through its
// status, nor change or remove the controller's; its other writes pass,
// and the controller's (not a node) still label.
func TestKubeletVAP(t *testing.T) {
	env := kubetest.Start(t)
	env.ApplyFiles(t, nodeAdmission)
	admin := env.Clientset(t)
	ctx := context.Background()
	// The kubelet's permissions (the Node authorizer's, which this API
	// server does not run): the bootstrap ClusterRole system:node.
	if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "vap-test-nodes"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: "Group", Name: "system:nodes"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	kubelet := func(node string) kubernetes.Interface {
		return kubernetes.NewForConfigOrDie(env.Impersonate("system:node:"+node, "system:nodes", "system:authenticated"))
	}
	k1 := kubelet("k1")
	register := func(cs kubernetes.Interface, name string, labels map[string]string) error {
		_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels}}, metav1.CreateOptions{})
		return err
	}
	waitRefused(t, "a kubelet registers with --node-labels=bridgehead.io/site=a", func() error {
		err := register(kubelet("k0"), "k0", map[string]string{"bridgehead.io/site": "a"})
		if err == nil {
			_ = admin.CoreV1().Nodes().Delete(ctx, "k0", metav1.DeleteOptions{})
		}
		return err
	})
	if err := register(k1, "k1", map[string]string{"kubernetes.io/hostname": "k1", "bridgehead-io/unrelated": "x"}); err != nil {
		t.Fatalf("kubelet k1 registers without bridgehead.io/ labels: %v", err)
	}
	// The controller assigns k1 (admin here: not a node identity).
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "k1", types.MergePatchType,
		[]byte(`{"metadata":{"labels":{"bridgehead.io/site":"a"},"annotations":{"bridgehead.io/pod-cidrs":"10.100.1.0/24"}}}`), metav1.PatchOptions{}); err != nil {
		t.Fatalf("the controller labels k1: %v", err)
	}
	// The kubelet's usual writes pass with the controller's labels on.
	if _, err := k1.CoreV1().Nodes().PatchStatus(ctx, "k1", []byte(`{"status":{"conditions":[{"type":"Ready","status":"True","reason":"KubeletReady"}],`+
		`"addresses":[{"type":"InternalIP","address":"10.10.0.7"}]}}`)); err != nil {
		t.Errorf("kubelet k1 patches its status: %v", err)
	}
	if _, err := k1.CoreV1().Nodes().Patch(ctx, "k1", types.StrategicMergePatchType, []byte(`{"metadata":{"labels":{"topology.kubernetes.io/zone":"z1"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("kubelet k1 sets another label: %v", err)
	}

	patch := func(body string, sub ...string) func() error {
		return func() error {
			_, err := k1.CoreV1().Nodes().Patch(ctx, "k1", types.MergePatchType, []byte(body), metav1.PatchOptions{}, sub...)
			return err
		}
	}
	for _, r := range []struct {
		what string
		do   func() error
	}{
		{"register with a subdomain's label", func() error {
			return register(kubelet("k2"), "k2", map[string]string{"pool.bridgehead.io/x": "y"})
		}},
		{"register with the pod-cidrs annotation", func() error {
			_, err := kubelet("k3").CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "k3",
				Annotations: map[string]string{"bridgehead.io/pod-cidrs": "10.100.1.0/24"}}}, metav1.CreateOptions{})
			return err
		}},
		{"register with the gateway-pool label", func() error {
			return register(kubelet("k4"), "k4", map[string]string{"bridgehead.io/gateway-pool": "site-a"})
		}},
		{"claim another site", patch(`{"metadata":{"labels":{"bridgehead.io/site":"b"}}}`)},
		{"claim another site through its status", patch(`{"metadata":{"labels":{"bridgehead.io/site":"b"}}}`, "status")},
		{"drop its site", patch(`{"metadata":{"labels":{"bridgehead.io/site":null}}}`)},
		{"claim another node's block", patch(`{"metadata":{"annotations":{"bridgehead.io/pod-cidrs":"10.100.2.0/24"}}}`)},
		{"claim another node's block through its status", patch(`{"metadata":{"annotations":{"bridgehead.io/pod-cidrs":"10.100.2.0/24"}}}`, "status")},
		{"add a bridgehead.io annotation", patch(`{"metadata":{"annotations":{"bridgehead.io/other":"x"}}}`)},
	} {
		if err := r.do(); !apierrors.IsForbidden(err) {
			t.Errorf("kubelet: %s: %v, want 403 Forbidden", r.what, err)
		}
	}
	k1n, err := admin.CoreV1().Nodes().Get(ctx, "k1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if k1n.Labels["bridgehead.io/site"] != "a" || k1n.Annotations["bridgehead.io/pod-cidrs"] != "10.100.1.0/24" || k1n.Labels["topology.kubernetes.io/zone"] != "z1" {
		t.Errorf("k1: labels %v annotations %v", k1n.Labels, k1n.Annotations)
	}
	for _, n := range []string{"k2", "k3", "k4"} {
		if _, err := admin.CoreV1().Nodes().Get(ctx, n, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("Node %s registered: %v", n, err)
		}
	}
	// The controller still moves labels.
	if _, err := admin.CoreV1().Nodes().Patch(ctx, "k1", types.MergePatchType, []byte(`{"metadata":{"labels":{"bridgehead.io/site":"b"}}}`), metav1.PatchOptions{}); err != nil {
		t.Errorf("the controller relabels k1: %v", err)
	}
}
