// Package gatewaytest sets up what the tests of a gateway's Kubernetes
// writers share (kube/register, kube/meshstatus): a real API server with
// bridgehead's CRDs, Gateway objects created as the admin, and a client
// with one gateway's own credential, its ServiceAccount and own-status
// role as kube.GatewayRBAC makes them.
package gatewaytest

import (
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// API is a running API server with the CRDs installed.
type API struct {
	Env *kubetest.Env
	// Admin is a client as the admin; Gateways, its Gateway resource.
	Admin    dynamic.Interface
	Gateways dynamic.ResourceInterface
}

// Start starts the API server (kubetest.Start: skipped without its
// binaries) and installs the CRDs of crdDir.
func Start(t *testing.T, crdDir string) *API {
	t.Helper()
	env := kubetest.Start(t)
	env.InstallCRDs(t, crdDir)
	admin, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	return &API{Env: env, Admin: admin, Gateways: admin.Resource(v1.SchemeGroupVersion.WithResource(v1.GatewaysResource))}
}

// CreateGateway creates Gateway name of site at address, as the admin.
func (a *API) CreateGateway(t *testing.T, name, site, address string) {
	t.Helper()
	a.Env.CreateObjects(t, &v1.Gateway{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Gateway"},
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1.GatewaySpec{Site: site, Address: v1.IP(address)},
	})
}

// Client admits gateway name (its ServiceAccount and own-status role)
// and returns a client that acts as that ServiceAccount, so every write
// is authorized as the gateway's would be.
func (a *API) Client(t *testing.T, name string) dynamic.Interface {
	t.Helper()
	a.Env.CreateObjects(t, kube.GatewayRBAC(name)...)
	user, groups := kubetest.ServiceAccount(kube.GatewayNamespace, name)
	c, err := dynamic.NewForConfig(a.Env.Impersonate(user, groups...))
	if err != nil {
		t.Fatal(err)
	}
	return c
}
