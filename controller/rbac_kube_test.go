package controller

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// controllerSA is the controller's ServiceAccount in deploy/kubernetes.
const controllerSA = "bridgehead-controller"

// deployRBAC are the shipped manifests the controller runs under.
var deployRBAC = []string{"../deploy/kubernetes/namespace.yaml", "../deploy/kubernetes/controller-rbac.yaml"}

// TestKubeDeployRBAC runs the controller with the credential that
// deploy/kubernetes gives it: the ServiceAccount and (Cluster)Roles of
// controller-rbac.yaml, applied from that file, and a bound token from the
// TokenRequest API (what the pod mounts), not impersonation. It must do
// its whole job with it: hold the Lease, assign and allocate a Node, set
// the Node condition, publish the catalog (with a Gateway registered in
// its status), record Events about Nodes and Sites, write Site status,
// and release the Lease on stop. No reconcile may fail (a 403 is a
// failed reconcile). The same credential is then refused what the
// controller has no business doing.
func TestKubeDeployRBAC(t *testing.T) {
	h := startKube(t)
	h.env.ApplyFiles(t, deployRBAC...)
	sa := h.env.ServiceAccountConfig(t, testNS, controllerSA)
	saCS := kubernetes.NewForConfigOrDie(sa)
	saDyn := dynamic.NewForConfigOrDie(sa)
	ctx := context.Background()

	h.createSite(t, "site-a", []string{"10.10.0.0/16"}, []string{"10.100.0.0/16"}, 24, 64)
	h.createSite(t, "tiny", []string{"10.30.0.0/24"}, []string{"10.130.0.0/24"}, 24, 64) // one block
	h.createGateway(t, "site-a", "gw1", "10.10.0.1", "192.0.2.1:51820")
	h.createGateway(t, "tiny", "gw1", "10.30.0.1", "192.0.2.3:51820")
	// site-a's gw2 registers itself: key and endpoint in status only.
	if _, err := h.dyn.Resource(GatewaysGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "Gateway", "metadata": map[string]any{"name": "site-a.gw2"},
		"spec": map[string]any{"site": "site-a", "address": "10.10.0.2"}}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gw2Key := testKey("site-a/gw2-registered")
	if _, err := h.dyn.Resource(GatewaysGVR).Patch(ctx, "site-a.gw2", types.MergePatchType,
		fmt.Appendf(nil, `{"status":{"publicKey":%q,"endpoint":"192.0.2.2:51820"}}`, gw2Key), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	cw := watchCatalog(t, h.cs)

	in := h.start(t, "bhc-rbac", func(o *Options) { o.Client, o.Dynamic = saCS, saDyn })
	waitLeader(t, h, in, 30*time.Second)
	lease, err := h.cs.CoordinationV1().Leases(testNS).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil || lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity != "bhc-rbac" {
		t.Fatalf("lease %v: %v", lease, err)
	}

	for _, n := range []struct{ name, ip string }{
		{"bhc-rbac-a", "10.10.1.1"}, {"bhc-rbac-none", "192.168.77.1"}, {"bhc-rbac-t1", "10.30.0.5"}, {"bhc-rbac-t2", "10.30.0.6"},
	} {
		if err := h.createNode(ctx, n.name, n.ip); err != nil {
			t.Fatal(err)
		}
	}
	// Assign and allocate (nodes patch), the Node condition of a node
	// with no site (nodes/status patch).
	h.obs.waitFor(t, 15*time.Second, "bhc-rbac-a allocated", func() bool {
		n := h.obs.node("bhc-rbac-a")
		return allocated(n) && n.Labels[LabelSite] == "site-a"
	})
	h.obs.waitFor(t, 15*time.Second, "bhc-rbac-none's NoSite condition", func() bool {
		n := h.obs.node("bhc-rbac-none")
		return n != nil && siteCondition(n).Reason == "NoSite"
	})
	// Events about a Node and a Site (events.k8s.io in default).
	h.waitEvent(t, "Node", "bhc-rbac-none", "NoSite")
	h.waitEvent(t, "Site", "tiny", "PoolExhausted")
	// Site status (sites/status).
	h.obs.waitFor(t, 15*time.Second, "site status", func() bool {
		a, tiny := h.obs.site("site-a"), h.obs.site("tiny")
		return a != nil && tiny != nil && a.Status.Nodes == 1 && a.Status.Gateways == 2 &&
			meta.IsStatusConditionTrue(a.Status.Conditions, v1alpha1.ConditionValid) &&
			meta.IsStatusConditionTrue(tiny.Status.Conditions, v1alpha1.ConditionPoolExhausted)
	})
	// The catalog (ConfigMaps in its namespace), with the Gateway that
	// registered in its status (gateways read).
	cw.waitFor(t, 15*time.Second, "the catalog with bhc-rbac-a and site-a.gw2's registered key", func() bool {
		all, err := cw.assemble("site-a")
		if err != nil {
			return false
		}
		for _, s := range all {
			if s.Name != "site-a" {
				continue
			}
			_, hasN := hasNode(s.Nodes, "bhc-rbac-a")
			for _, g := range s.Gateways {
				if g.Name == "gw2" && g.PublicKey == gw2Key && hasN {
					return true
				}
			}
		}
		return false
	})
	for _, kind := range []string{"node", "site", "catalog"} {
		if v := testutil.ToFloat64(in.c.metrics.reconciles.WithLabelValues(kind, "error")); v != 0 {
			t.Errorf("%v failed %s reconciles under the deploy RBAC", v, kind)
		}
	}
	if v := testutil.ToFloat64(in.c.metrics.catalogPublishes.WithLabelValues("error")); v != 0 {
		t.Errorf("%v failed catalog publications under the deploy RBAC", v)
	}

	// Stop (SIGTERM in a pod): the Lease is released (leases update).
	in.stop(t)
	lease, err = h.cs.CoordinationV1().Leases(testNS).Get(ctx, LeaseName, metav1.GetOptions{})
	if err != nil || (lease.Spec.HolderIdentity != nil && *lease.Spec.HolderIdentity != "") {
		t.Errorf("lease after stop: holder %v, err %v; want released", lease.Spec.HolderIdentity, err)
	}

	checkControllerRefusals(t, h, saCS, saDyn)
}

// checkControllerRefusals: what the controller's credential must be
// refused (403), each a thing the controller never does.
func checkControllerRefusals(t *testing.T, h *kubeHarness, cs kubernetes.Interface, dyn dynamic.Interface) {
	t.Helper()
	ctx := context.Background()
	probe := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bhc-rbac-probe", Namespace: "default"}}
	if _, err := h.cs.CoreV1().ConfigMaps("default").Create(ctx, probe, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	other := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "someone-elses-lease"}}
	if _, err := h.cs.CoordinationV1().Leases(testNS).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gwStatus := []byte(`{"status":{"endpoint":"198.51.100.66:51820"}}`)
	refusals := []struct {
		what string
		do   func() error
	}{
		{"list Secrets in its namespace", func() error {
			_, err := cs.CoreV1().Secrets(testNS).List(ctx, metav1.ListOptions{})
			return err
		}},
		{"create a Secret in its namespace", func() error {
			_, err := cs.CoreV1().Secrets(testNS).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}},
		{"get a Secret in kube-system", func() error {
			_, err := cs.CoreV1().Secrets("kube-system").Get(ctx, "x", metav1.GetOptions{})
			return err
		}},
		{"update a ConfigMap in default", func() error {
			_, err := cs.CoreV1().ConfigMaps("default").Update(ctx, probe, metav1.UpdateOptions{})
			return err
		}},
		{"create a ConfigMap in kube-system", func() error {
			_, err := cs.CoreV1().ConfigMaps("kube-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}},
		{"create a Lease in default", func() error {
			_, err := cs.CoordinationV1().Leases("default").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: LeaseName}}, metav1.CreateOptions{})
			return err
		}},
		{"update another Lease in its namespace", func() error {
			cur, err := h.cs.CoordinationV1().Leases(testNS).Get(ctx, other.Name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			_, err = cs.CoordinationV1().Leases(testNS).Update(ctx, cur, metav1.UpdateOptions{})
			return err
		}},
		{"delete its own Lease", func() error {
			return cs.CoordinationV1().Leases(testNS).Delete(ctx, LeaseName, metav1.DeleteOptions{})
		}},
		{"an Event in kube-system", func() error {
			_, err := cs.EventsV1().Events("kube-system").Create(ctx, &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Name: "x"},
				EventTime: metav1.NowMicro(), Reason: "R", Action: "A", Type: corev1.EventTypeNormal, ReportingController: component, ReportingInstance: "x",
				Regarding: corev1.ObjectReference{Kind: "Node", Name: "bhc-rbac-a"}}, metav1.CreateOptions{})
			return err
		}},
		{"delete a Node", func() error {
			return cs.CoreV1().Nodes().Delete(ctx, "bhc-rbac-a", metav1.DeleteOptions{})
		}},
		{"create a Node", func() error {
			_, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "bhc-rbac-rogue"}}, metav1.CreateOptions{})
			return err
		}},
		{"list Pods", func() error {
			_, err := cs.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"patch a Site's spec", func() error {
			// A change the Site's own rules allow (it may patch the
			// Site, for its finalizer): the admission policy refuses it.
			_, err := dyn.Resource(SitesGVR).Patch(ctx, "site-a", types.MergePatchType, []byte(`{"spec":{"keepalive":"31s"}}`), metav1.PatchOptions{})
			return err
		}},
		{"create a Site", func() error {
			_, err := dyn.Resource(SitesGVR).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": v1alpha1.SchemeGroupVersion.String(), "kind": "Site", "metadata": map[string]any{"name": "rogue"}, "spec": map[string]any{}}}, metav1.CreateOptions{})
			return err
		}},
		{"write a Gateway's status (the gateway's own)", func() error {
			_, err := dyn.Resource(GatewaysGVR).Patch(ctx, "site-a.gw1", types.MergePatchType, gwStatus, metav1.PatchOptions{}, "status")
			return err
		}},
		{"patch a Gateway's spec", func() error {
			_, err := dyn.Resource(GatewaysGVR).Patch(ctx, "site-a.gw1", types.MergePatchType, []byte(`{"spec":{"endpoint":"198.51.100.66:51820"}}`), metav1.PatchOptions{})
			return err
		}},
		{"a token for its own ServiceAccount", func() error {
			_, err := cs.CoreV1().ServiceAccounts(testNS).CreateToken(ctx, controllerSA, &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}},
	}
	for _, r := range refusals {
		if err := r.do(); !apierrors.IsForbidden(err) {
			t.Errorf("controller credential: %s: %v, want 403 Forbidden", r.what, err)
		}
	}
}
