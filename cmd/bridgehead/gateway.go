package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// `bridgehead gateway admit SITE/NAME` is the operator's one step to let a
// gateway (a VM or scale-set instance outside the cluster) into a site:
//
//   - the Gateway object SITE.NAME, created when missing (--address, and
//     --endpoint unless the gateway registers it); an existing one is
//     left as it is, apart from the key below;
//   - its credential, kube.GatewayRBAC: a ServiceAccount SITE.NAME in
//     bridgehead-gateways and a ClusterRole bound to it alone that names
//     its own Gateway (resourceNames) for status writes, applied
//     server-side (no hand-edited resourceNames; admitting again changes
//     nothing);
//   - a kubeconfig for the gateway (mode 0600) whose token is a
//     TokenRequest of that ServiceAccount valid for --token-ttl (24 h by
//     default, not a year), kept in a file of its own beside it
//     (FILE.token, 0600) that the kubeconfig names with tokenFile.
//     client-go reads a tokenFile again every minute, so renewing is
//     running the same command again (from a timer on an admin host,
//     well inside the TTL) and copying FILE.token to the gateway: a
//     running gateway picks the new token up without a restart. Revoking
//     is deleting the ServiceAccount.
//
// With --in-cluster, NAME is a node of the site's gateway pool
// (deploy/kubernetes/gateway): the Gateway's address and endpoint come
// from the Node, the grant is a ClusterRole of its own naming this
// Gateway, bound to the site's shared ServiceAccount (instead of a list
// of names edited by hand in rbac.yaml), the node is labelled into the
// pool, and no kubeconfig is written: the pod has its own token.
//
// Key pinning lives in the API server, not in the controller: the
// ValidatingAdmissionPolicy bridgehead-gateway-key-pin
// (deploy/kubernetes/gateway-keys.yaml) lets a Gateway's status.publicKey
// be set once (the first registration: trust on first use) and then
// change only to the key in its spec. --pin KEY sets spec.publicKey when
// the gateway is admitted (no trust on first use at all: the operator
// read the key on the gateway, `bridgehead pubkey`); --approve-key KEY
// sets it on an admitted Gateway whose gateway came back with a new key
// (a reimage), the key the refusal in the gateway's log names, and does
// nothing else (no credential, no kubeconfig: an in-cluster gateway has
// its pod's token, and an outside one keeps the one it has). The
// controller already takes spec.publicKey over the status, so an
// approved key is published at once.

// gatewayAdmitManager is the field manager of what admit applies.
const gatewayAdmitManager = "bridgehead-gateway-admit"

// defaultTokenTTL is --token-ttl's default: a day, renewed by admitting
// again.
const defaultTokenTTL = 24 * time.Hour

// dnsLabel is a site's or gateway's name (they form object names).
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

type gatewayAdmitOptions struct {
	kubeconfig string
	site, name string
	address    string
	endpoint   string
	pin        string
	approveKey string
	out        string
	server     string
	tokenTTL   time.Duration
	inCluster  bool
	behindNAT  bool
	now        func() time.Time
}

func setupGateway(fs *flag.FlagSet) action {
	o := gatewayAdmitOptions{now: time.Now}
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "the admin's kubeconfig `FILE` (default: $KUBECONFIG, else ~/.kube/config)")
	fs.StringVar(&o.address, "address", "", "a new Gateway's LAN `IP` (spec.address; needed when the Gateway does not exist)")
	fs.StringVar(&o.endpoint, "endpoint", "", "a new Gateway's `HOST:PORT` (spec.endpoint; empty: the gateway registers it)")
	fs.BoolVar(&o.behindNAT, "behind-nat", false, "a new Gateway behind NAT with no endpoint of its own (spec.behindNAT): its site is reached through a hub site (its Site's via)")
	fs.StringVar(&o.pin, "pin", "", "pin the gateway's public `KEY` (spec.publicKey) from the start: no trust on first use")
	fs.StringVar(&o.approveKey, "approve-key", "", "approve a new public `KEY` for an admitted Gateway (a reimaged gateway; its log names the key)")
	fs.StringVar(&o.out, "o", "", "write the gateway's kubeconfig to `FILE` (mode 0600) and its token to FILE.token (default SITE.NAME.kubeconfig)")
	fs.StringVar(&o.server, "server", "", "the API server `URL` the gateway reaches (default: the admin kubeconfig's)")
	fs.BoolVar(&o.inCluster, "in-cluster", false, "an in-cluster gateway (deploy/kubernetes/gateway): NAME is its node; address and endpoint from the Node, its site's ServiceAccount bound to this Gateway, the node labelled into the gateway pool; no kubeconfig")
	fs.DurationVar(&o.tokenTTL, "token-ttl", defaultTokenTTL, "how long the gateway's token is valid (`DURATION`, at least 10m); renew by admitting again")
	return func(std *stdio, args []string) error {
		if len(args) == 0 || args[0] != "admit" {
			return usageError{errors.New("needs the subcommand admit: bridgehead gateway admit SITE/NAME [flags]")}
		}
		// Flags before and after SITE/NAME alike.
		var pos []string
		for rest := args[1:]; ; {
			if err := fs.Parse(rest); err != nil {
				return usageError{err}
			}
			if fs.NArg() == 0 {
				break
			}
			pos = append(pos, fs.Arg(0))
			rest = fs.Args()[1:]
		}
		if len(pos) != 1 {
			return usageError{errors.New("admit needs one SITE/NAME (the Gateway SITE.NAME)")}
		}
		site, name, ok := strings.Cut(pos[0], "/")
		if !ok || !dnsLabel.MatchString(site) || !dnsLabel.MatchString(name) {
			return usageError{fmt.Errorf("%q: want SITE/NAME, each a DNS label (lower case letters, digits, '-')", pos[0])}
		}
		o.site, o.name = site, name
		if o.tokenTTL < 10*time.Minute {
			return usageError{fmt.Errorf("--token-ttl %v: the API server issues tokens of 10m or more", o.tokenTTL)}
		}
		if o.pin != "" && o.approveKey != "" {
			return usageError{errors.New("--pin and --approve-key: one or the other")}
		}
		if o.behindNAT && (o.endpoint != "" || o.inCluster) {
			return usageError{errors.New("--behind-nat: a gateway behind NAT has no endpoint (not with --endpoint or --in-cluster)")}
		}
		for flagName, k := range map[string]string{"--pin": o.pin, "--approve-key": o.approveKey} {
			if k == "" {
				continue
			}
			if _, err := bhcrypto.ParsePublicKey(k); err != nil {
				return usageError{fmt.Errorf("%s %q: not a public key: %v", flagName, k, err)}
			}
		}
		if o.out == "" {
			o.out = site + "." + name + ".kubeconfig"
		}
		cfg, err := adminConfig(o.kubeconfig)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		return gatewayAdmit(ctx, std, cfg, o)
	}
}

// adminConfig loads the operator's kubeconfig as kubectl does.
func adminConfig(path string) (*rest.Config, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = path
	cfg, err := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, &clientcmd.ConfigOverrides{}).ClientConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	return cfg, nil
}

var (
	gatewaysGVR = v1.SchemeGroupVersion.WithResource(v1.GatewaysResource)
	sitesGVR    = v1.SchemeGroupVersion.WithResource(v1.SitesResource)
	rbacGVRs    = map[string]schema.GroupVersionResource{
		"ServiceAccount":     {Version: "v1", Resource: "serviceaccounts"},
		"ClusterRole":        {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		"ClusterRoleBinding": {Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	}
)

func gatewayAdmit(ctx context.Context, std *stdio, cfg *rest.Config, o gatewayAdmitOptions) error {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	gwName := o.site + "." + o.name
	fail := func(format string, args ...any) error {
		fmt.Fprintf(std.err, "bridgehead gateway admit %s/%s: %s\n", o.site, o.name, fmt.Sprintf(format, args...))
		return errReported
	}
	if _, err := dyn.Resource(sitesGVR).Get(ctx, o.site, metav1.GetOptions{}); err != nil {
		if apierrors.IsNotFound(err) {
			return fail("no Site %s: create the site first (bridgehead catalog to-resources)", o.site)
		}
		return fail("Site %s: %v", o.site, err)
	}

	if o.inCluster {
		// Its address and endpoint from its Node (the DaemonSet's pod
		// uses the node's network and the hostPort 51820).
		n, err := cs.CoreV1().Nodes().Get(ctx, o.name, metav1.GetOptions{})
		if err != nil {
			return fail("an in-cluster gateway is named after its node: Node %s: %v", o.name, err)
		}
		for _, a := range n.Status.Addresses {
			switch {
			case a.Type == corev1.NodeInternalIP && o.address == "" && !strings.Contains(a.Address, ":"):
				o.address = a.Address
			case a.Type == corev1.NodeExternalIP && o.endpoint == "" && !strings.Contains(a.Address, ":"):
				o.endpoint = net.JoinHostPort(a.Address, strconv.Itoa(inClusterPort))
			}
		}
	}

	// The Gateway.
	gw, err := dyn.Resource(gatewaysGVR).Get(ctx, gwName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		if o.approveKey != "" {
			return fail("no Gateway %s to approve a key for (admit it with --pin KEY)", gwName)
		}
		if o.address == "" {
			return fail("Gateway %s does not exist: --address IP (its LAN address) creates it", gwName)
		}
		spec := map[string]any{"site": o.site, "address": o.address}
		if o.endpoint != "" {
			spec["endpoint"] = o.endpoint
		}
		if o.behindNAT {
			spec["behindNAT"] = true
		}
		if o.pin != "" {
			spec["publicKey"] = o.pin
		}
		u := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": v1.SchemeGroupVersion.String(), "kind": "Gateway",
			"metadata": map[string]any{"name": gwName, "labels": map[string]any{"app.kubernetes.io/part-of": "bridgehead"}},
			"spec":     spec,
		}}
		if _, err := dyn.Resource(gatewaysGVR).Create(ctx, u, metav1.CreateOptions{FieldManager: gatewayAdmitManager}); err != nil {
			return fail("create Gateway %s: %v", gwName, err)
		}
		how := "its key pinned on first registration"
		if o.pin != "" {
			how = "key pinned to " + o.pin
		}
		fmt.Fprintf(std.out, "Gateway %s created (%s)\n", gwName, how)
	case err != nil:
		return fail("Gateway %s: %v", gwName, err)
	default:
		site, _, _ := unstructured.NestedString(gw.Object, "spec", "site")
		if site != o.site {
			return fail("Gateway %s belongs to site %q", gwName, site)
		}
		for flagName, want := range map[string]string{"address": o.address, "endpoint": o.endpoint} {
			if got, _, _ := unstructured.NestedString(gw.Object, "spec", flagName); want != "" && got != want {
				return fail("Gateway %s has spec.%s %q, not --%s %q: change it with kubectl, not here", gwName, flagName, got, flagName, want)
			}
		}
		key := o.pin + o.approveKey
		if key == "" {
			fmt.Fprintf(std.out, "Gateway %s exists\n", gwName)
			break
		}
		was, _, _ := unstructured.NestedString(gw.Object, "spec", "publicKey")
		registered, _, _ := unstructured.NestedString(gw.Object, "status", "publicKey")
		patch := fmt.Appendf(nil, `{"spec":{"publicKey":%q}}`, key)
		if _, err := dyn.Resource(gatewaysGVR).Patch(ctx, gwName, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: gatewayAdmitManager}); err != nil {
			return fail("approve key %s on Gateway %s: %v", key, gwName, err)
		}
		fmt.Fprintf(std.out, "Gateway %s: key %s approved (pinned before: %s; registered: %s)\n", gwName, key, orNone(was), orNone(registered))
		if o.approveKey != "" {
			// An approval only: the gateway keeps its credential (an
			// in-cluster gateway has its pod's).
			return nil
		}
	}

	if o.inCluster {
		return admitInCluster(ctx, std, cs, dyn, o, fail)
	}

	// Its credential.
	if err := applyObjects(ctx, dyn, kube.GatewayRBAC(gwName)); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(std.out, "ServiceAccount %s/%s and ClusterRole %s%s applied (status of Gateway %s only)\n",
		kube.GatewayNamespace, gwName, kube.GatewayRolePrefix, gwName, gwName)

	// Its kubeconfig, with a short-lived token.
	secs := int64(o.tokenTTL / time.Second)
	tr, err := cs.CoreV1().ServiceAccounts(kube.GatewayNamespace).CreateToken(ctx, gwName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return fail("token for ServiceAccount %s/%s: %v", kube.GatewayNamespace, gwName, err)
	}
	server := o.server
	if server == "" {
		server = cfg.Host
	}
	ca := cfg.CAData
	if len(ca) == 0 && cfg.CAFile != "" {
		if ca, err = os.ReadFile(cfg.CAFile); err != nil {
			return fail("the admin kubeconfig's CA: %v", err)
		}
	}
	if err := writeGatewayKubeconfig(o.out, server, ca, tr.Status.Token); err != nil {
		return fail("%v", err)
	}
	exp := tr.Status.ExpirationTimestamp.UTC()
	fmt.Fprintf(std.out, "kubeconfig %s (token in %s, mode 0600) valid until %s (%v)\n",
		o.out, o.out+".token", exp.Format(time.RFC3339), exp.Sub(o.now()).Round(time.Minute))
	if got := exp.Sub(o.now()); got < o.tokenTTL-time.Minute {
		fmt.Fprintf(std.err, "note: asked for %v, the API server issued %v (its --service-account-max-token-expiration)\n", o.tokenTTL, got.Round(time.Minute))
	}
	fmt.Fprintf(std.out, "renew before then: run this command again and copy %s to the gateway (it rereads the file; no restart)\n", filepath.Base(o.out)+".token")
	return nil
}

// inClusterPort is the tunnel's port of an in-cluster gateway: the
// DaemonSet's hostPort (deploy/kubernetes/gateway/daemonset.yaml).
const inClusterPort = 51820

// inClusterGatewayRBAC is the grant that admits in-cluster gateway
// site.node: the site's ServiceAccount (kube-system/bridgehead-gateway-<site>,
// deploy/kubernetes/gateway/rbac.yaml, shared by the DaemonSet's pods) may
// write the status of that one Gateway (resourceNames), by a ClusterRole
// and binding of its own, so admitting a node adds objects instead of
// editing a list. The admission policy bridgehead-gateway-own-node binds
// each pod's token further to its own node's Gateway.
func inClusterGatewayRBAC(site, node string) []runtime.Object {
	gwName := site + "." + node
	name := kube.GatewayRolePrefix + gwName
	labels := map[string]string{"app.kubernetes.io/part-of": "bridgehead", v1.GroupName + "/gateway": gwName, v1.GroupName + "/site": site}
	return []runtime.Object{
		&rbacv1.ClusterRole{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRole"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			Rules: []rbacv1.PolicyRule{{APIGroups: []string{v1.GroupName}, Resources: []string{v1.GatewaysResource + "/status"},
				ResourceNames: []string{gwName}, Verbs: []string{"get", "update", "patch"}}},
		},
		&rbacv1.ClusterRoleBinding{
			TypeMeta:   metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
			RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: inClusterGatewaySA(site), Namespace: "kube-system"}},
		},
	}
}

// inClusterGatewaySA is the ServiceAccount of a site's in-cluster gateways.
func inClusterGatewaySA(site string) string { return "bridgehead-gateway-" + site }

// gatewayPoolLabel puts a node into its site's gateway pool: the
// DaemonSet's nodeSelector. Only the operator sets it (no kubelet may set
// a bridgehead.io/ label: deploy/kubernetes/node-admission.yaml).
const gatewayPoolLabel = v1.GroupName + "/gateway-pool"

// admitInCluster grants the site's ServiceAccount this Gateway's status
// and labels the node into the site's gateway pool: the DaemonSet's pod
// comes, generates its key and registers it. No kubeconfig: the pod has
// its own token.
func admitInCluster(ctx context.Context, std *stdio, cs kubernetes.Interface, dyn dynamic.Interface, o gatewayAdmitOptions, fail func(string, ...any) error) error {
	gwName := o.site + "." + o.name
	if err := applyObjects(ctx, dyn, inClusterGatewayRBAC(o.site, o.name)); err != nil {
		return fail("%v", err)
	}
	fmt.Fprintf(std.out, "ClusterRole %s%s applied: ServiceAccount kube-system/%s writes the status of Gateway %s\n",
		kube.GatewayRolePrefix, gwName, inClusterGatewaySA(o.site), gwName)
	if _, err := cs.CoreV1().ServiceAccounts("kube-system").Get(ctx, inClusterGatewaySA(o.site), metav1.GetOptions{}); apierrors.IsNotFound(err) {
		fmt.Fprintf(std.err, "note: no ServiceAccount kube-system/%s yet: apply deploy/kubernetes/gateway for site %s\n", inClusterGatewaySA(o.site), o.site)
	}
	patch := fmt.Appendf(nil, `{"metadata":{"labels":{%q:%q}}}`, gatewayPoolLabel, o.site)
	if _, err := cs.CoreV1().Nodes().Patch(ctx, o.name, types.MergePatchType, patch, metav1.PatchOptions{FieldManager: gatewayAdmitManager}); err != nil {
		return fail("label Node %s: %v", o.name, err)
	}
	fmt.Fprintf(std.out, "Node %s labelled %s=%s: the site's gateway DaemonSet runs there\n", o.name, gatewayPoolLabel, o.site)
	return nil
}

// applyObjects applies objs server-side under gatewayAdmitManager.
func applyObjects(ctx context.Context, dyn dynamic.Interface, objs []runtime.Object) error {
	for _, obj := range objs {
		u, err := toUnstructured(obj)
		if err != nil {
			return err
		}
		body, err := u.MarshalJSON()
		if err != nil {
			return err
		}
		force := true
		ri := dyn.Resource(rbacGVRs[u.GetKind()]).Namespace(u.GetNamespace())
		if _, err := ri.Patch(ctx, u.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: gatewayAdmitManager, Force: &force}); err != nil {
			if apierrors.IsNotFound(err) && u.GetNamespace() != "" {
				return fmt.Errorf("namespace %s: %w (apply deploy/kubernetes first)", u.GetNamespace(), err)
			}
			return fmt.Errorf("apply %s %s: %w", u.GetKind(), u.GetName(), err)
		}
	}
	return nil
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func toUnstructured(obj runtime.Object) (*unstructured.Unstructured, error) {
	m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	unstructured.RemoveNestedField(u.Object, "metadata", "creationTimestamp")
	return u, nil
}

// writeGatewayKubeconfig writes the kubeconfig at path and the token at
// path.token, each mode 0600, each replaced whole (a temporary file
// renamed over it, so the gateway never reads half a token). The
// kubeconfig names the token file by its base name, which clientcmd
// resolves beside the kubeconfig: copy both into one directory.
func writeGatewayKubeconfig(path, server string, ca []byte, token string) error {
	tokenPath := path + ".token"
	if err := writeFile0600(tokenPath, []byte(token)); err != nil {
		return err
	}
	c := clientcmdapi.NewConfig()
	c.Clusters["bridgehead"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	c.AuthInfos["gateway"] = &clientcmdapi.AuthInfo{TokenFile: filepath.Base(tokenPath)}
	c.Contexts["bridgehead"] = &clientcmdapi.Context{Cluster: "bridgehead", AuthInfo: "gateway"}
	c.CurrentContext = "bridgehead"
	data, err := clientcmd.Write(*c)
	if err != nil {
		return err
	}
	return writeFile0600(path, data)
}

func writeFile0600(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}
