package v1alpha1_test

import (
	"context"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

func toUnstructured(t *testing.T, obj runtime.Object, kind string) *unstructured.Unstructured {
	t.Helper()
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: m}
	u.SetAPIVersion(v1.SchemeGroupVersion.String())
	u.SetKind(kind)
	return u
}

func fromUnstructured(t *testing.T, u *unstructured.Unstructured, obj any) {
	t.Helper()
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, obj); err != nil {
		t.Fatal(err)
	}
}

// TestCRDsInRealAPIServer installs the generated CRDs in a real
// kube-apiserver, creates a Site and a Gateway, reads them back with the
// defaults applied, writes status through the subresource, and checks
// that OpenAPI/CEL validation refuses bad values.
func TestCRDsInRealAPIServer(t *testing.T) {
	env := kubetest.Start(t)
	t.Logf("etcd ready in %v, kube-apiserver ready in %v", env.EtcdReady, env.APIServerReady)
	start := time.Now()
	env.InstallCRDs(t, "../../../deploy/kubernetes/crds")
	t.Logf("CRDs established in %v", time.Since(start))
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sites := dc.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource))
	gws := dc.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource))

	site := &v1.Site{
		ObjectMeta: metav1.ObjectMeta{Name: "east"},
		Spec: v1.SiteSpec{
			NodeCIDRs:     []v1.CIDR{"10.1.0.0/16", "fd00:1::/64"},
			PodCIDRs:      []v1.CIDR{"10.101.0.0/16", "fd00:101::/48"},
			ProbeInterval: &metav1.Duration{Duration: 500 * time.Millisecond},
			Relay:         &v1.RelaySpec{Port: 8131, AllowedPorts: []int32{10250}},
		},
	}
	u, err := sites.Create(ctx, toUnstructured(t, site, "Site"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create site: %v", err)
	}
	var got v1.Site
	fromUnstructured(t, u, &got)
	if got.Spec.PodBlockSize != 24 || got.Spec.PodBlockSize6 != 80 {
		t.Errorf("defaults: podBlockSize %d podBlockSize6 %d, want 24 and 80", got.Spec.PodBlockSize, got.Spec.PodBlockSize6)
	}
	if got.Spec.ProbeInterval.Duration != 500*time.Millisecond || got.Spec.Relay.Port != 8131 {
		t.Errorf("site read back %+v", got.Spec)
	}

	gw := &v1.Gateway{
		ObjectMeta: metav1.ObjectMeta{Name: "east.gw1"},
		Spec: v1.GatewaySpec{
			Site:      "east",
			Address:   "10.1.0.5",
			Address6:  "fd00:1::5",
			Endpoint:  "203.0.113.5:51820",
			PublicKey: "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
		},
	}
	if _, err := gws.Create(ctx, toUnstructured(t, gw, "Gateway"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create gateway: %v", err)
	}
	u, err = gws.Get(ctx, "east.gw1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var gotGW v1.Gateway
	fromUnstructured(t, u, &gotGW)
	if gotGW.Spec != gw.Spec {
		t.Errorf("gateway read back %+v, want %+v", gotGW.Spec, gw.Spec)
	}
	// Status goes through the subresource only.
	gotGW.Status = v1.GatewayStatus{
		Endpoint: "203.0.113.5:51820", RemoteGateways: 2, RemoteGatewaysUp: 1,
		Conditions: []metav1.Condition{{Type: v1.ConditionReady, Status: metav1.ConditionTrue, Reason: "Forwarding", LastTransitionTime: metav1.Now()}},
	}
	if _, err := gws.UpdateStatus(ctx, toUnstructured(t, &gotGW, "Gateway"), metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update status: %v", err)
	}
	// The site cannot move.
	gotGW.Spec.Site = "west"
	u, _ = gws.Get(ctx, "east.gw1", metav1.GetOptions{})
	moved := toUnstructured(t, &gotGW, "Gateway")
	moved.SetResourceVersion(u.GetResourceVersion())
	if _, err := gws.Update(ctx, moved, metav1.UpdateOptions{}); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "site is immutable") {
		t.Errorf("changing spec.site: %v, want invalid: site is immutable", err)
	}

	bad := []struct {
		name string
		obj  runtime.Object
		kind string
		want string // in the error
	}{
		{"cidr not a cidr", &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: "b1"}, Spec: v1.SiteSpec{NodeCIDRs: []v1.CIDR{"10.1.0.0/33"}}}, "Site", "no host bits"},
		{"cidr host bits", &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: "b2"}, Spec: v1.SiteSpec{PodCIDRs: []v1.CIDR{"10.1.0.1/16"}}}, "Site", "no host bits"},
		{"block size", &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: "b3"}, Spec: v1.SiteSpec{PodBlockSize: 33}}, "Site", "podBlockSize"},
		{"probe interval", &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: "b4"}, Spec: v1.SiteSpec{ProbeInterval: &metav1.Duration{Duration: time.Millisecond}}}, "Site", "between 50ms and 30s"},
		{"relay port", &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: "b5"}, Spec: v1.SiteSpec{Relay: &v1.RelaySpec{Port: 70000}}}, "Site", "relay.port"},
		{"gateway address", &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "b6"}, Spec: v1.GatewaySpec{Site: "east", Address: "10.1.0.300"}}, "Gateway", "must be an IP address"},
		{"gateway key", &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "b7"}, Spec: v1.GatewaySpec{Site: "east", Address: "10.1.0.7", PublicKey: "short"}}, "Gateway", "publicKey"},
		{"gateway behind NAT with an endpoint", &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "b9"}, Spec: v1.GatewaySpec{Site: "east", Address: "10.1.0.9", Endpoint: "203.0.113.9:51820", BehindNAT: true}}, "Gateway", "a gateway behindNAT has no endpoint"},
		{"gateway address6 family", &v1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: "b8"}, Spec: v1.GatewaySpec{Site: "east", Address: "10.1.0.8", Address6: "10.1.0.8"}}, "Gateway", "must be an IPv6 address"},
	}
	for _, tc := range bad {
		t.Run(tc.name, func(t *testing.T) {
			res := sites
			if tc.kind == "Gateway" {
				res = gws
			}
			_, err := res.Create(ctx, toUnstructured(t, tc.obj, tc.kind), metav1.CreateOptions{})
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("create: %v, want invalid mentioning %q", err, tc.want)
			}
		})
	}
}
