package deploy

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/kubetest"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

const (
	gwSA       = "bridgehead-gateway-site-a"
	gwAdmitted = "site-a.aks-gateways-31415926-vmss000000"
	// gwAdmittedOther is admitted too, for another node.
	gwAdmittedOther = "site-a.aks-gateways-31415926-vmss000001"
)

// TestGatewayDaemonSet: deploy/kubernetes/gateway (site-a's in-cluster
// gateways) passes the API server's server-side dry run and applies with
// kubectl on top of deploy/kubernetes; its DaemonSet is what a gateway
// needs and no more (host network, NET_ADMIN, NET_RAW, BPF and SYS_NICE only,
// /dev/net/tun, the gateway pool's nodeSelector, probes, resources,
// --gateway=$(NODE_NAME)), a pod of it is admitted (dry run); its config
// checks as each node's gateway; and the site's ServiceAccount, with a
// bound token, follows the catalog and writes an admitted Gateway's
// status, and is refused (403) for a Gateway not admitted and for
// everything else.
func TestGatewayDaemonSet(t *testing.T) {
	env := kubetest.Start(t)
	applyDeploy(t, env)
	kubectl(t, env, nil, "apply", "-k", "kubernetes/gateway", "--dry-run=server")
	kubectl(t, env, nil, "apply", "-k", "kubernetes/gateway")
	cs := env.Clientset(t)
	ctx := context.Background()

	ds, err := cs.AppsV1().DaemonSets("kube-system").Get(ctx, gwSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	spec := ds.Spec.Template.Spec
	if !spec.HostNetwork || spec.ServiceAccountName != gwSA || spec.AutomountServiceAccountToken == nil || !*spec.AutomountServiceAccountToken {
		t.Errorf("hostNetwork %v, serviceAccountName %q, automount %v", spec.HostNetwork, spec.ServiceAccountName, spec.AutomountServiceAccountToken)
	}
	if spec.NodeSelector["bridgehead.io/gateway-pool"] != "site-a" {
		t.Errorf("nodeSelector %v", spec.NodeSelector)
	}
	c := spec.Containers[0]
	if got := strings.Join(c.Args, " "); !strings.HasPrefix(got, "run ") || !strings.Contains(got, "--gateway=$(NODE_NAME)") {
		t.Errorf("args %q", got)
	}
	sc := c.SecurityContext
	var add []string
	for _, a := range sc.Capabilities.Add {
		add = append(add, string(a))
	}
	slices.Sort(add)
	if !slices.Equal(add, []string{"BPF", "NET_ADMIN", "NET_RAW", "SYS_NICE"}) || len(sc.Capabilities.Drop) != 1 || sc.Capabilities.Drop[0] != "ALL" ||
		sc.Privileged != nil && *sc.Privileged || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("capabilities add %v drop %v, privileged %v, allowPrivilegeEscalation %v", add, sc.Capabilities.Drop, sc.Privileged, sc.AllowPrivilegeEscalation)
	}
	tun := false
	for _, m := range c.VolumeMounts {
		for _, v := range spec.Volumes {
			if v.Name == m.Name && v.HostPath != nil && v.HostPath.Path == "/dev/net/tun" && m.MountPath == "/dev/net/tun" &&
				v.HostPath.Type != nil && *v.HostPath.Type == corev1.HostPathCharDev {
				tun = true
			}
		}
	}
	if !tun {
		t.Error("/dev/net/tun is not mounted from the host as a character device")
	}
	if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" {
		t.Errorf("probes %+v %+v", c.ReadinessProbe, c.LivenessProbe)
	}
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("resources %+v", c.Resources)
	}
	// A pod of the template is admitted in kube-system (dry run).
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{GenerateName: "gw-", Namespace: "kube-system", Labels: ds.Spec.Template.Labels}, Spec: spec}
	pod.Spec.NodeName = "aks-gateways-31415926-vmss000000"
	if _, err := cs.CoreV1().Pods("kube-system").Create(ctx, pod, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}); err != nil {
		t.Errorf("a gateway pod is not admitted: %v", err)
	}

	checkGatewayConfig(t, cs)
	checkRelayTLSMount(t, cs, spec)
	checkSiteGatewayCredential(t, env)
}

// relayTLSFiles are the relay's TLS files as a Site's spec.relay.tls names
// them (docs/getting-started/aks.md): relative to the config's directory.
var relayTLSFiles = config.RelayTLS{CertFile: "relay/tls.crt", KeyFile: "relay/tls.key", ClientCAFile: "relay/ca.crt"}

// checkRelayTLSMount: the gateway container's config directory is one
// projected volume of the site's ConfigMap and the optional Secret
// bridgehead-relay-site-a, whose files land where relayTLSFiles says.
// The volume is laid out here as the kubelet would from the API's
// objects (a kubernetes.io/tls Secret made for the test): the config,
// run as a node's gateway with a catalog whose Site relay has TLS, checks
// and its relay's TLS loads; without the Secret the pod is still admitted
// and the relay's TLS fails to load, naming the file.
func checkRelayTLSMount(t *testing.T, cs kubernetes.Interface, spec corev1.PodSpec) {
	t.Helper()
	ctx := context.Background()
	const mountPath, secretName = "/etc/bridgehead", "bridgehead-relay-site-a"
	var vol *corev1.Volume
	for _, m := range spec.Containers[0].VolumeMounts {
		if m.MountPath == mountPath {
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == m.Name {
					vol = &spec.Volumes[i]
				}
			}
		}
	}
	if vol == nil || vol.Projected == nil {
		t.Fatalf("%s is not a projected volume: %+v", mountPath, vol)
	}
	var secret *corev1.SecretProjection
	for _, src := range vol.Projected.Sources {
		if src.Secret != nil && src.Secret.Name == secretName {
			secret = src.Secret
		}
	}
	if secret == nil || secret.Optional == nil || !*secret.Optional {
		t.Fatalf("the projected config volume has no optional Secret %s: %+v", secretName, vol.Projected.Sources)
	}
	for _, it := range secret.Items {
		if it.Key == "tls.key" && (it.Mode == nil || *it.Mode&0o077 != 0) {
			t.Errorf("relay key %s mode %v: want no access for group and others", it.Path, it.Mode)
		}
	}
	certPEM, keyPEM := selfSigned(t)
	if _, err := cs.CoreV1().Secrets("kube-system").Create(ctx, &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: "kube-system"},
		Type:       corev1.SecretTypeTLS,
		Data:       map[string][]byte{"tls.crt": certPEM, "tls.key": keyPEM, "ca.crt": certPEM},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	catalog := `relay:
  listen: 10.224.0.4:8131
  tls: {certFile: ` + relayTLSFiles.CertFile + `, keyFile: ` + relayTLSFiles.KeyFile + `, clientCAFile: ` + relayTLSFiles.ClientCAFile + `}
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: aks-gateways-31415926-vmss000000, address: 10.224.0.4, endpoint: "198.51.100.1:51820", publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: "203.0.113.7:51820", publicKey: fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M=}
`
	for _, withSecret := range []bool{true, false} {
		dir := projectVolume(t, cs, vol.Projected, withSecret)
		path := filepath.Join(dir, "bridgehead.yaml")
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		opts := config.CheckOptions{SkipPrivateKey: true, Overrides: config.Overrides{Gateway: "aks-gateways-31415926-vmss000000"}}
		c, problems, _ := config.CheckWithCatalog(path, data, []byte(catalog), opts)
		if len(problems) > 0 {
			t.Fatalf("the gateway config with a relay: %v", problems)
		}
		_, err = config.LoadRelayTLS(c)
		switch {
		case withSecret && err != nil:
			t.Errorf("the relay's TLS from the mounted Secret: %v", err)
		case !withSecret && (err == nil || !strings.Contains(err.Error(), relayTLSFiles.CertFile)):
			t.Errorf("the relay's TLS with no Secret: %v, want an error naming %s", err, relayTLSFiles.CertFile)
		}
	}
}

// projectVolume lays out a projected volume in a new directory from the
// API's ConfigMaps and Secrets of kube-system, as the kubelet does (items
// by path, every key without items; an optional source or key that is
// missing is left out). withSecrets false lays it out as if no Secret
// existed.
func projectVolume(t *testing.T, cs kubernetes.Interface, p *corev1.ProjectedVolumeSource, withSecrets bool) string {
	t.Helper()
	ctx := context.Background()
	dir := t.TempDir()
	write := func(data map[string][]byte, items []corev1.KeyToPath, optional *bool) {
		if len(items) == 0 {
			for k := range data {
				items = append(items, corev1.KeyToPath{Key: k, Path: k})
			}
		}
		for _, it := range items {
			b, ok := data[it.Key]
			if !ok {
				if optional == nil || !*optional {
					t.Fatalf("projected key %s is missing", it.Key)
				}
				continue
			}
			f := filepath.Join(dir, it.Path)
			if err := os.MkdirAll(filepath.Dir(f), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, src := range p.Sources {
		switch {
		case src.ConfigMap != nil:
			cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(ctx, src.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			data := map[string][]byte{}
			for k, v := range cm.Data {
				data[k] = []byte(v)
			}
			write(data, src.ConfigMap.Items, src.ConfigMap.Optional)
		case src.Secret != nil:
			sec, err := cs.CoreV1().Secrets("kube-system").Get(ctx, src.Secret.Name, metav1.GetOptions{})
			if !withSecrets || apierrors.IsNotFound(err) && src.Secret.Optional != nil && *src.Secret.Optional {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			write(sec.Data, src.Secret.Items, src.Secret.Optional)
		default:
			t.Fatalf("projected source %+v: not laid out by this test", src)
		}
	}
	return dir
}

// selfSigned returns a self-signed certificate and its key, PEM.
func selfSigned(t *testing.T) (certPEM, keyPEM []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "bridgehead-relay"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, IPAddresses: []net.IP{net.ParseIP("10.224.0.4")}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
}

// checkGatewayConfig: the ConfigMap's config, as node
// aks-gateways-31415926-vmss000000's gateway (run --gateway), checks
// with a catalog listing it; it follows with the pod's credential.
func checkGatewayConfig(t *testing.T, cs kubernetes.Interface) {
	t.Helper()
	cm, err := cs.CoreV1().ConfigMaps("kube-system").Get(context.Background(), gwSA, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "bridgehead.yaml")
	data := []byte(cm.Data["bridgehead.yaml"])
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
	catalog := `sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: aks-gateways-31415926-vmss000000, address: 10.224.0.4, endpoint: "198.51.100.1:51820", publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: "203.0.113.7:51820", publicKey: fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M=}
`
	opts := config.CheckOptions{SkipPrivateKey: true, Overrides: config.Overrides{Gateway: "aks-gateways-31415926-vmss000000"}}
	c, problems, _ := config.CheckWithCatalog(path, data, []byte(catalog), opts)
	if len(problems) > 0 {
		t.Fatalf("the gateway ConfigMap's config: %v", problems)
	}
	k := c.Kubernetes
	if !k.InCluster || !k.Follow || k.Gateway != gwAdmitted || c.CatalogPath() != "/var/lib/bridgehead/catalog.yaml" || c.LocalGateway() == nil {
		t.Errorf("kubernetes %+v, catalog %s, local gateway %v", *k, c.CatalogPath(), c.LocalGateway())
	}
}

// checkSiteGatewayCredential: the site's ServiceAccount (a bound token,
// as the pod's) reads the catalog and writes the status of an admitted
// Gateway; anything else is 403.
func checkSiteGatewayCredential(t *testing.T, env *kubetest.Env) {
	t.Helper()
	ctx := context.Background()
	admin := dyn(t, env.Config)
	gvr := v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)
	// The operator admits two gateway nodes with `bridgehead gateway
	// admit --in-cluster`: their Gateways (address and endpoint from the
	// Nodes), their grants to the site's ServiceAccount, the pool label.
	// A third Gateway exists but was never admitted (no grant).
	cs := env.Clientset(t)
	site := &unstructured.Unstructured{Object: map[string]any{"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Site",
		"metadata": map[string]any{"name": "site-a"}, "spec": map[string]any{"nodeCIDRs": []any{"10.224.0.0/16"}, "podCIDRs": []any{"10.244.0.0/16"}}}}
	if _, err := admin.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource)).Create(ctx, site, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), "bridgehead")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/bridgehead").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for i, name := range []string{gwAdmitted, gwAdmittedOther} {
		node := strings.TrimPrefix(name, "site-a.")
		n, err := cs.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("10.224.0.%d", 4+i)},
			{Type: corev1.NodeExternalIP, Address: fmt.Sprintf("198.51.100.%d", 1+i)}}
		if _, err := cs.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "gateway", "admit", "--kubeconfig", env.Kubeconfig, "site-a/"+node, "--in-cluster").CombinedOutput()
		if err != nil {
			t.Fatalf("bridgehead gateway admit site-a/%s --in-cluster: %v\n%s", node, err, out)
		}
		t.Logf("bridgehead gateway admit site-a/%s --in-cluster:\n%s", node, out)
		gw, err := admin.Resource(gvr).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if spec, _, _ := unstructured.NestedStringMap(gw.Object, "spec"); spec["address"] != fmt.Sprintf("10.224.0.%d", 4+i) || spec["endpoint"] != fmt.Sprintf("198.51.100.%d:51820", 1+i) {
			t.Errorf("Gateway %s spec %v: want the Node's addresses", name, spec)
		}
		if n, err := cs.CoreV1().Nodes().Get(ctx, node, metav1.GetOptions{}); err != nil || n.Labels["bridgehead.io/gateway-pool"] != "site-a" {
			t.Errorf("Node %s labels %v (%v): want it in site-a's gateway pool", node, n.Labels, err)
		}
	}
	notAdmitted := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Gateway",
		"metadata": map[string]any{"name": "site-a.not-admitted"}, "spec": map[string]any{"site": "site-a", "address": "10.224.0.9"},
	}}
	if _, err := admin.Resource(gvr).Create(ctx, notAdmitted, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The pod's token: bound to a pod of the DaemonSet on node
	// aks-gateways-31415926-vmss000000 (so it carries the node's name).
	node := strings.TrimPrefix(gwAdmitted, "site-a.")
	pod, err := cs.CoreV1().Pods("kube-system").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "bridgehead-gateway-site-a-x", Namespace: "kube-system"},
		Spec: corev1.PodSpec{NodeName: node, ServiceAccountName: gwSA,
			Containers: []corev1.Container{{Name: "gateway", Image: "ghcr.io/bridgehead/bridgehead:dev"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := cs.CoreV1().ServiceAccounts("kube-system").CreateToken(ctx, gwSA, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		BoundObjectRef: &authenticationv1.BoundObjectReference{APIVersion: "v1", Kind: "Pod", Name: pod.Name, UID: pod.UID},
	}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := &rest.Config{Host: env.Config.Host, TLSClientConfig: rest.TLSClientConfig{CAData: env.Config.CAData}, BearerToken: tr.Status.Token}
	gw := dyn(t, cfg).Resource(gvr)
	gwCS, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	status := []byte(`{"status":{"publicKey":"AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=","endpoint":"198.51.100.1:51820"}}`)
	if _, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").List(ctx, metav1.ListOptions{LabelSelector: "bridgehead.io/catalog"}); err != nil {
		t.Errorf("site gateway lists the catalog: %v", err)
	}
	if w, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").Watch(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("site gateway watches the catalog: %v", err)
	} else {
		w.Stop()
	}
	if _, err := gw.List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("site gateway lists Gateways: %v", err)
	}
	// The grant admit made a moment ago reaches the authorizer through an
	// informer, and the gateway retries a refused write: so does this.
	for deadline := time.Now().Add(30 * time.Second); ; {
		_, err := gw.Patch(ctx, gwAdmitted, types.MergePatchType, status, metav1.PatchOptions{}, "status")
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("site gateway writes an admitted Gateway's status: %v", err)
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	// The API server loads admission policies through an informer: the
	// policy applied a moment ago is in force once it refuses.
	deadline := time.Now().Add(15 * time.Second)
	for {
		_, err := gw.Patch(ctx, gwAdmittedOther, types.MergePatchType, status, metav1.PatchOptions{}, "status")
		if apierrors.IsForbidden(err) || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, r := range []struct {
		name string
		do   func() error
	}{
		{"another admitted node's Gateway (the token is bound to its own node)", func() error {
			_, err := gw.Patch(ctx, gwAdmittedOther, types.MergePatchType, status, metav1.PatchOptions{}, "status")
			return err
		}},
		{"its own node's Gateway with a token not bound to a pod", func() error {
			_, err := dyn(t, env.ServiceAccountConfig(t, "kube-system", gwSA)).Resource(gvr).Patch(ctx, gwAdmitted, types.MergePatchType, status, metav1.PatchOptions{}, "status")
			return err
		}},
		{"a Gateway not admitted", func() error {
			_, err := gw.Patch(ctx, "site-a.not-admitted", types.MergePatchType, status, metav1.PatchOptions{}, "status")
			return err
		}},
		{"an admitted Gateway's spec", func() error {
			_, err := gw.Patch(ctx, gwAdmitted, types.MergePatchType, []byte(`{"spec":{"endpoint":"198.51.100.66:51820"}}`), metav1.PatchOptions{})
			return err
		}},
		{"ConfigMaps in its own namespace", func() error {
			_, err := gwCS.CoreV1().ConfigMaps("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"Secrets", func() error {
			_, err := gwCS.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{})
			return err
		}},
		{"writing the catalog", func() error {
			_, err := gwCS.CoreV1().ConfigMaps("bridgehead-system").Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{})
			return err
		}},
	} {
		if err := r.do(); !apierrors.IsForbidden(err) {
			t.Errorf("site gateway, %s: %v, want 403 Forbidden", r.name, err)
		}
	}
}
