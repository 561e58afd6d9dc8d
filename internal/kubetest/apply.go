package kubetest

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// ApplyFiles creates every object of the YAML files (as the admin), in
// file order, so a test runs under the manifests a deployment ships
// rather than a copy of them. An object that exists already is left as
// it is. Kinds are mapped to resources by discovery: CRDs must be
// installed first.
func (e *Env) ApplyFiles(t testing.TB, files ...string) {
	t.Helper()
	create := e.creator(t)
	for _, f := range files {
		objs, err := decodeObjects(f)
		if err != nil {
			t.Fatalf("kubetest: %v", err)
		}
		for _, o := range objs {
			if err := create(o); err != nil {
				t.Fatalf("kubetest: %s: %v", filepath.Base(f), err)
			}
		}
	}
}

// CreateObjects creates typed objects as the admin, in order, as
// ApplyFiles does the objects of files: each must carry its apiVersion
// and kind (TypeMeta). The namespace of a namespaced object is created
// first when it is missing.
func (e *Env) CreateObjects(t testing.TB, objs ...runtime.Object) {
	t.Helper()
	create := e.creator(t)
	for _, obj := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		if err != nil {
			t.Fatalf("kubetest: %T: %v", obj, err)
		}
		o := &unstructured.Unstructured{Object: m}
		if o.GetAPIVersion() == "" || o.GetKind() == "" {
			t.Fatalf("kubetest: %T %s: no apiVersion or kind (set its TypeMeta)", obj, o.GetName())
		}
		if ns := o.GetNamespace(); ns != "" {
			nsObj := &unstructured.Unstructured{}
			nsObj.SetAPIVersion("v1")
			nsObj.SetKind("Namespace")
			nsObj.SetName(ns)
			if err := create(nsObj); err != nil {
				t.Fatalf("kubetest: %v", err)
			}
		}
		if err := create(o); err != nil {
			t.Fatalf("kubetest: %v", err)
		}
	}
}

// creator returns a function that creates an object, as the admin,
// through the resource discovery maps its kind to; an object that
// exists already is left as it is.
func (e *Env) creator(t testing.TB) func(*unstructured.Unstructured) error {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(e.Config)
	if err != nil {
		t.Fatalf("kubetest: discovery: %v", err)
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	return func(o *unstructured.Unstructured) error { return create(mapper, dyn, o) }
}

func create(mapper meta.RESTMapper, dyn dynamic.Interface, o *unstructured.Unstructured) error {
	gvk := o.GroupVersionKind()
	m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return fmt.Errorf("%s %s: %w", gvk.Kind, o.GetName(), err)
	}
	var ri dynamic.ResourceInterface = dyn.Resource(m.Resource)
	if ns := o.GetNamespace(); ns != "" {
		ri = dyn.Resource(m.Resource).Namespace(ns)
	}
	if _, err := ri.Create(context.Background(), o, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create %s %s: %w", gvk.Kind, o.GetName(), err)
	}
	return nil
}

// ServiceAccountConfig returns a client config that authenticates as
// ServiceAccount ns/name with a bound token from the TokenRequest API (as
// a pod's projected token does), not by impersonation: the API server
// authenticates and authorizes it as it would the pod. The ServiceAccount
// must exist.
func (e *Env) ServiceAccountConfig(t testing.TB, ns, name string) *rest.Config {
	t.Helper()
	cs, err := kubernetes.NewForConfig(e.Config)
	if err != nil {
		t.Fatalf("kubetest: %v", err)
	}
	exp := int64(3600)
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(context.Background(), name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &exp}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("kubetest: token for ServiceAccount %s/%s: %v", ns, name, err)
	}
	return e.tokenConfig(tr.Status.Token)
}

// tokenConfig is a client config of this API server that authenticates
// with a bearer token.
func (e *Env) tokenConfig(token string) *rest.Config {
	return &rest.Config{
		Host:            e.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: e.pki.caPEM},
		BearerToken:     token,
		QPS:             e.Config.QPS,
		Burst:           e.Config.Burst,
	}
}

// WriteKubeconfig writes cfg (a bearer token config from
// ServiceAccountConfig) as a kubeconfig file at path, for a process.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	if cfg.BearerToken == "" {
		return fmt.Errorf("kubetest: kubeconfig %s: only bearer token configs", path)
	}
	c := clientcmdapi.NewConfig()
	c.Clusters["kubetest"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	c.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: cfg.BearerToken}
	c.Contexts["kubetest"] = &clientcmdapi.Context{Cluster: "kubetest", AuthInfo: "user"}
	c.CurrentContext = "kubetest"
	return clientcmd.WriteToFile(*c, path)
}
