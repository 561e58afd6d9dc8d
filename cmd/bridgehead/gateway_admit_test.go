package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	"github.com/bridgehead/bridgehead/kube"
	"github.com/bridgehead/bridgehead/kube/register"
)

const (
	admitKey1 = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8="
	admitKey2 = "ICEiIyQlJicoKSorLC0uLzAxMjM0NTY3ODk6Ozw9Pj8="
	admitKey3 = "QEFCQ0RFRkdISUpLTE1OT1BRUlNUVVZXWFlaW1xdXl8="
)

// TestGatewayAdmit runs `bridgehead gateway admit` against a real API
// server with deploy/kubernetes' gateway files applied: it creates the
// Gateway, the gateway's own credential and a kubeconfig (mode 0600,
// token file beside it, valid for --token-ttl) that the gateway's real
// register code publishes with (loaded as the daemon loads it); admitting
// again changes no object. Then the key pinning of gateway-keys.yaml: the
// first registered key is pinned, a changed key is refused with the
// command that approves it, `--approve-key` approves it, a key pinned
// with --pin before the first registration refuses any other, and a key
// cannot be removed.
func TestGatewayAdmit(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, "../../deploy/kubernetes/crds")
	env.ApplyFiles(t, "../../deploy/kubernetes/namespace.yaml", "../../deploy/kubernetes/gateway-rbac.yaml", "../../deploy/kubernetes/gateway-keys.yaml")
	ctx := context.Background()
	admin := dynamic.NewForConfigOrDie(env.Config)
	site := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "bridgehead.io/v1alpha1", "kind": "Site",
		"metadata": map[string]any{"name": "site-b"}, "spec": map[string]any{"nodeCIDRs": []any{"192.168.50.0/24"}, "podCIDRs": []any{"10.245.0.0/16"}}}}
	if _, err := admin.Resource(sitesGVR).Create(ctx, site, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	kc := filepath.Join(dir, "gw-b2.kubeconfig")
	admit := func(args ...string) (int, string, string) {
		t.Helper()
		return runCLI(t, "", append([]string{"gateway", "admit", "--kubeconfig", env.Kubeconfig}, args...)...)
	}

	// Refusals before anything is made.
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"site-b/gw-b2", "-o", kc}, "--address IP"},
		{[]string{"site-x/gw-b2", "--address", "192.168.50.3"}, "no Site site-x"},
		{[]string{"site-b/gw-b2", "--approve-key", admitKey2}, "no Gateway site-b.gw-b2"},
	} {
		if code, _, stderr := admit(c.args...); code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("admit %v: exit %d, stderr %q; want a failure saying %q", c.args, code, stderr, c.want)
		}
	}
	if code, _, _ := admit("site-b/gw-b2", "--token-ttl", "5m"); code != 2 {
		t.Errorf("--token-ttl 5m: exit %d, want 2 (the API's minimum is 10m)", code)
	}

	start := time.Now()
	code, stdout, stderr := admit("site-b/gw-b2", "--address", "192.168.50.3", "--endpoint", "203.0.113.7:51820", "--token-ttl", "1h", "-o", kc)
	if code != 0 {
		t.Fatalf("admit: exit %d\n%s%s", code, stdout, stderr)
	}
	t.Logf("admit:\n%s", stdout)
	for _, f := range []string{kc, kc + ".token"} {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(f), st.Mode().Perm())
		}
	}
	if exp := tokenExpiry(t, kc+".token"); exp.Before(start.Add(59*time.Minute)) || exp.After(start.Add(61*time.Minute)) {
		t.Errorf("token expires %v, want an hour after %v", exp, start)
	}
	gw, err := admin.Resource(gatewaysGVR).Get(ctx, "site-b.gw-b2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if spec, _, _ := unstructured.NestedStringMap(gw.Object, "spec"); spec["site"] != "site-b" || spec["address"] != "192.168.50.3" || spec["endpoint"] != "203.0.113.7:51820" || spec["publicKey"] != "" {
		t.Errorf("Gateway spec %v", spec)
	}

	// Admitting again changes no object (a new token only).
	versions := func() map[string]string {
		v := map[string]string{}
		for _, r := range []struct {
			kind string
			ns   string
			name string
		}{{"Gateway", "", "site-b.gw-b2"}, {"ServiceAccount", kube.GatewayNamespace, "site-b.gw-b2"},
			{"ClusterRole", "", kube.GatewayRolePrefix + "site-b.gw-b2"}, {"ClusterRoleBinding", "", kube.GatewayRolePrefix + "site-b.gw-b2"}} {
			gvr, ok := rbacGVRs[r.kind]
			if !ok {
				gvr = gatewaysGVR
			}
			u, err := admin.Resource(gvr).Namespace(r.ns).Get(ctx, r.name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s %s: %v", r.kind, r.name, err)
			}
			v[r.kind] = u.GetResourceVersion()
		}
		return v
	}
	before := versions()
	oldToken, _ := os.ReadFile(kc + ".token")
	if code, stdout, stderr := admit("site-b/gw-b2", "-o", kc); code != 0 {
		t.Fatalf("admit again: exit %d\n%s%s", code, stdout, stderr)
	}
	if after := versions(); !equalMaps(before, after) {
		t.Errorf("admitting again changed objects: %v -> %v", before, after)
	}
	if newToken, _ := os.ReadFile(kc + ".token"); bytes.Equal(oldToken, newToken) {
		t.Error("admitting again wrote the same token")
	}

	// The gateway, as the daemon loads its kubeconfig, registers with the
	// register code; its credential writes its own status only.
	rc, err := clientcmd.BuildConfigFromFlags("", kc)
	if err != nil {
		t.Fatal(err)
	}
	gwDyn := dynamic.NewForConfigOrDie(rc)
	var logs bytes.Buffer
	publish := func(key string) error {
		t.Helper()
		tick := make(chan time.Time)
		p, err := register.New(register.Options{Client: gwDyn, Gateway: "site-b.gw-b2", Log: slog.New(slog.NewTextHandler(&logs, nil)),
			Source: func() register.Status {
				return register.Status{PublicKey: key, Endpoint: "203.0.113.7:51820", Ready: true}
			},
			Ticker: func(time.Duration) (<-chan time.Time, func()) { return tick, func() {} }})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = p.Run(ctx) }()
		// Run publishes at once; a tick after it means the first write
		// returned.
		tick <- time.Now()
		cancel()
		<-done
		return statusKeyIs(t, admin, "site-b.gw-b2", key)
	}
	// The credential's ClusterRole, created a moment ago, reaches the
	// API server's authorizer through an informer: the register code
	// retries a refused write, as here (the bound is a failure's).
	for deadline := time.Now().Add(30 * time.Second); ; {
		err := publish(admitKey1)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("first registration: %v\n%s", err, logs.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	// Another Gateway's status: RBAC refuses it.
	other := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "bridgehead.io/v1alpha1", "kind": "Gateway",
		"metadata": map[string]any{"name": "site-b.gw-b9"}, "spec": map[string]any{"site": "site-b", "address": "192.168.50.9"}}}
	if _, err := admin.Resource(gatewaysGVR).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gwDyn.Resource(gatewaysGVR).Patch(ctx, "site-b.gw-b9", types.MergePatchType, []byte(`{"status":{"publicKey":"`+admitKey3+`"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
		t.Errorf("gw-b2's credential writes gw-b9's status: %v, want 403", err)
	}

	// A reimage: the new key is refused, with the approving command.
	waitPolicy(t, func() error {
		_, err := gwDyn.Resource(gatewaysGVR).Patch(ctx, "site-b.gw-b2", types.MergePatchType, []byte(`{"status":{"publicKey":"`+admitKey3+`"}}`), metav1.PatchOptions{}, "status")
		return err
	})
	if err := publish(admitKey2); err == nil {
		t.Fatal("a changed key was registered without approval")
	}
	approve := "bridgehead gateway admit site-b/gw-b2 --approve-key " + admitKey2
	if !strings.Contains(logs.String(), approve) || !strings.Contains(logs.String(), "level=ERROR") {
		t.Errorf("the gateway's log does not say how to approve its key (%q):\n%s", approve, logs.String())
	}
	tokenBefore, _ := os.ReadFile(kc + ".token")
	if code, stdout, stderr := admit("site-b/gw-b2", "--approve-key", admitKey2); code != 0 {
		t.Fatalf("approve: exit %d\n%s%s", code, stdout, stderr)
	} else if !strings.Contains(stdout, "key "+admitKey2+" approved (pinned before: none; registered: "+admitKey1+")") {
		t.Errorf("approve said %q", stdout)
	}
	if tokenAfter, _ := os.ReadFile(kc + ".token"); !bytes.Equal(tokenBefore, tokenAfter) {
		t.Error("an approval rewrote the gateway's token")
	}
	if err := publish(admitKey2); err != nil {
		t.Fatalf("the approved key: %v", err)
	}
	if err := publish(admitKey3); err == nil {
		t.Error("a third key was registered without approval")
	}
	for what, body := range map[string]string{
		"remove the key":        `{"status":{"publicKey":null}}`,
		"as the admin, rekey":   `{"status":{"publicKey":"` + admitKey1 + `"}}`,
		"as the admin, unpin":   `{"status":{"publicKey":null,"endpoint":"203.0.113.8:51820"}}`,
		"as the gateway, rekey": `{"status":{"publicKey":"` + admitKey3 + `"}}`,
	} {
		c := admin
		if strings.HasPrefix(what, "as the gateway") || what == "remove the key" {
			c = gwDyn
		}
		if _, err := c.Resource(gatewaysGVR).Patch(ctx, "site-b.gw-b2", types.MergePatchType, []byte(body), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) {
			t.Errorf("%s: %v, want 403", what, err)
		}
	}

	// Pinned before the first registration: no trust on first use.
	kc3 := filepath.Join(dir, "gw-b3.kubeconfig")
	if code, stdout, stderr := admit("site-b/gw-b3", "--address", "192.168.50.4", "--pin", admitKey1, "-o", kc3); code != 0 {
		t.Fatalf("admit --pin: exit %d\n%s%s", code, stdout, stderr)
	}
	rc3, err := clientcmd.BuildConfigFromFlags("", kc3)
	if err != nil {
		t.Fatal(err)
	}
	gw3 := dynamic.NewForConfigOrDie(rc3).Resource(gatewaysGVR)
	waitPolicy(t, func() error { // gw-b3's RBAC in force: the policy is what refuses
		_, err := gw3.Patch(ctx, "site-b.gw-b3", types.MergePatchType, []byte(`{"status":{"publicKey":"`+admitKey3+`"}}`), metav1.PatchOptions{}, "status")
		return err
	})
	if _, err := gw3.Patch(ctx, "site-b.gw-b3", types.MergePatchType, []byte(`{"status":{"publicKey":"`+admitKey2+`"}}`), metav1.PatchOptions{}, "status"); !apierrors.IsForbidden(err) ||
		!strings.Contains(err.Error(), "--approve-key "+admitKey2) {
		t.Errorf("gw-b3 registers a key other than its pinned one: %v, want 403 naming the approving command", err)
	}
	if _, err := gw3.Patch(ctx, "site-b.gw-b3", types.MergePatchType, []byte(`{"status":{"publicKey":"`+admitKey1+`"}}`), metav1.PatchOptions{}, "status"); err != nil {
		t.Errorf("gw-b3 registers its pinned key: %v", err)
	}
	// A key rollover the pinned key signed needs no approve-key: the
	// policy lets a status in whose previousPublicKey is the pinned key
	// and that carries a signature (the catalog renderer checks the
	// signature, kube/keys.go); one from another previous key does not.
	sig := base64.StdEncoding.EncodeToString(make([]byte, 64))
	rollover := func(key, prev string) error {
		_, err := gw3.Patch(ctx, "site-b.gw-b3", types.MergePatchType, []byte(`{"status":{"publicKey":"`+key+`","previousPublicKey":"`+prev+
			`","previousKeyExpires":"2030-01-02T03:04:05Z","keySignature":"`+sig+`"}}`), metav1.PatchOptions{}, "status")
		return err
	}
	if err := rollover(admitKey3, admitKey2); !apierrors.IsForbidden(err) {
		t.Errorf("gw-b3 rolls over from a key that is not its pinned one: %v, want 403", err)
	}
	if err := rollover(admitKey2, admitKey1); err != nil {
		t.Errorf("gw-b3 rolls over from its pinned key: %v", err)
	}
	if code, _, stderr := admit("site-b/gw-b3", "--address", "192.168.50.5"); code == 0 || !strings.Contains(stderr, "spec.address") {
		t.Errorf("admitting gw-b3 with another address: exit %d %q, want a refusal", code, stderr)
	}

	// A gateway behind NAT: no endpoint, spec.behindNAT, so the
	// controller publishes it for the hub to relay.
	if code, stdout, stderr := admit("site-b/gw-b4", "--address", "192.168.50.6", "--behind-nat", "-o", filepath.Join(dir, "gw-b4.kubeconfig")); code != 0 {
		t.Fatalf("admit --behind-nat: exit %d\n%s%s", code, stdout, stderr)
	}
	gw4, err := admin.Resource(gatewaysGVR).Get(ctx, "site-b.gw-b4", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if nat, _, _ := unstructured.NestedBool(gw4.Object, "spec", "behindNAT"); !nat {
		t.Errorf("Gateway site-b.gw-b4 spec %v: want behindNAT", gw4.Object["spec"])
	}
}

// waitPolicy retries do until the key-pin admission policy refuses it
// (policies and RBAC objects applied a moment ago are loaded through
// informers; admission comes after authorization, so the caller's RBAC
// is in force then too).
func waitPolicy(t *testing.T, do func() error) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := do()
		if apierrors.IsForbidden(err) && strings.Contains(err.Error(), "bridgehead-gateway-key-pin") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the key-pin admission policy is not in force after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// statusKeyIs returns nil when Gateway name's status.publicKey is key.
func statusKeyIs(t *testing.T, c dynamic.Interface, name, key string) error {
	t.Helper()
	u, err := c.Resource(gatewaysGVR).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got, _, _ := unstructured.NestedString(u.Object, "status", "publicKey"); got != key {
		return &keyMismatch{got: got, want: key}
	}
	return nil
}

type keyMismatch struct{ got, want string }

func (e *keyMismatch) Error() string { return "status.publicKey " + e.got + ", want " + e.want }

// tokenExpiry reads the exp claim of the JWT in file.
func tokenExpiry(t *testing.T, file string) time.Time {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	parts := strings.Split(strings.TrimSpace(string(b)), ".")
	if len(parts) != 3 {
		t.Fatalf("%s: not a JWT", file)
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		t.Fatal(err)
	}
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err := json.Unmarshal(payload, &claims); err != nil {
		t.Fatal(err)
	}
	return time.Unix(claims.Exp, 0)
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// TestGatewayAdmitUsage: mistakes in how admit is called are exit 2,
// said before any API request.
func TestGatewayAdmitUsage(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"gateway"}, "needs the subcommand admit"},
		{[]string{"gateway", "approve", "a/b"}, "needs the subcommand admit"},
		{[]string{"gateway", "admit"}, "admit needs one SITE/NAME"},
		{[]string{"gateway", "admit", "a/b", "c/d"}, "admit needs one SITE/NAME"},
		{[]string{"gateway", "admit", "site-b.gw-b2"}, "want SITE/NAME"},
		{[]string{"gateway", "admit", "Site/gw"}, "want SITE/NAME"},
		{[]string{"gateway", "admit", "a/b", "--pin", admitKey1, "--approve-key", admitKey2}, "one or the other"},
		{[]string{"gateway", "admit", "a/b", "--approve-key", "not-a-key"}, "--approve-key \"not-a-key\": not a public key"},
		{[]string{"gateway", "admit", "a/b", "--token-ttl", "9m"}, "10m or more"},
		{[]string{"gateway", "admit", "a/b", "--behind-nat", "--endpoint", "203.0.113.7:51820"}, "a gateway behind NAT has no endpoint"},
	} {
		code, _, stderr := runCLI(t, "", c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 saying %q", c.args, code, stderr, c.want)
		}
	}
}
