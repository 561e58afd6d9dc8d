package config

import (
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// kubeAt adds a kubernetes section after line 18 of the fixture; its
// first line is then line 19.
func kubeAt(section string) map[int]string {
	return map[int]string{18: "clampMSS: false\n" + section}
}

func TestKubernetesSection(t *testing.T) {
	c := mustParse(t, nil)
	if c.Kubernetes != nil {
		t.Errorf("kubernetes on without the section: %+v", *c.Kubernetes)
	}
	c = mustParse(t, kubeAt("kubernetes:\n  kubeconfig: /etc/bridgehead/kubeconfig"))
	k := c.Kubernetes
	if k == nil {
		t.Fatal("kubernetes section not decoded")
	}
	if want := c.Site + "." + c.Gateway; k.Gateway != want {
		t.Errorf("gateway defaults to %q, want %q", k.Gateway, want)
	}
	if c.KubeconfigPath() != "/etc/bridgehead/kubeconfig" {
		t.Errorf("KubeconfigPath %q", c.KubeconfigPath())
	}
	c = mustParse(t, kubeAt("kubernetes:\n  kubeconfig: kc\n  gateway: other.gw"))
	if c.Kubernetes.Gateway != "other.gw" {
		t.Errorf("gateway %q, want other.gw", c.Kubernetes.Gateway)
	}
	if want := filepath.Join(filepath.Dir(c.Path), "kc"); c.Path != "" && c.KubeconfigPath() != want {
		t.Errorf("relative kubeconfig resolved to %q, want %q", c.KubeconfigPath(), want)
	}
}

// TestKubernetesInCluster: inCluster replaces the kubeconfig (the pod's
// own token); check does not look for a kubeconfig file then.
func TestKubernetesInCluster(t *testing.T) {
	c := mustParse(t, kubeAt("kubernetes:\n  inCluster: true"))
	if !c.Kubernetes.InCluster || c.KubeconfigPath() != "" {
		t.Errorf("inCluster %v, kubeconfig %q", c.Kubernetes.InCluster, c.KubeconfigPath())
	}
	readKey := func(string) ([]byte, error) { return nil, nil }
	problems, _ := Check(c, CheckOptions{ReadFile: readKey})
	for _, p := range problems {
		if strings.HasPrefix(p.Field, "kubernetes") {
			t.Errorf("in-cluster credential reported: %v", p)
		}
	}
}

// TestOverridesGateway: one file serves every gateway of a DaemonSet;
// the override names this one, at load and at every check, and the
// Gateway object's name follows it.
func TestOverridesGateway(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "gw.yaml")
	text := "site: a\ngateway: somebody-else\nprivateKeyFile: a.key\nkubernetes: {kubeconfig: kc, follow: true}\n"
	for name, data := range map[string]string{path: text, filepath.Join(dir, DefaultCatalogFile): ipCatalog} {
		if err := os.WriteFile(name, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if c, err := Load(path); err != nil || c.Gateway != "somebody-else" || c.LocalGateway() != nil {
		t.Fatalf("without the override: %v, %+v", err, c)
	}
	over := Overrides{Gateway: "gw-a1"}
	c, err := LoadWith(path, over)
	if err != nil {
		t.Fatal(err)
	}
	if c.Gateway != "gw-a1" || c.Kubernetes.Gateway != "a.gw-a1" || c.LocalGateway() == nil {
		t.Errorf("gateway %q, Gateway object %q", c.Gateway, c.Kubernetes.Gateway)
	}
	if head, err := LoadHeadWith(path, over); err != nil || head.Gateway != "gw-a1" {
		t.Errorf("LoadHeadWith: %v %v", head, err)
	}
	if _, problems, _ := CheckData(path, []byte(text), CheckOptions{SkipPrivateKey: true, Overrides: over}); len(problems) > 0 {
		t.Errorf("CheckData with the override: %v", problems)
	}
	if _, problems, _ := CheckWithCatalog(path, []byte(text), []byte(ipCatalog), CheckOptions{SkipPrivateKey: true, Overrides: over}); len(problems) > 0 {
		t.Errorf("CheckWithCatalog with the override: %v", problems)
	}
}

func TestKubernetesErrors(t *testing.T) {
	for _, tc := range []struct {
		name, section string
		want          []want
	}{
		{"no kubeconfig", "kubernetes:\n  gateway: a.b", []want{{19, "kubernetes.kubeconfig", "is required"}}},
		{"kubeconfig and inCluster", "kubernetes:\n  kubeconfig: kc\n  inCluster: true", []want{{21, "kubernetes.inCluster", "use one credential"}}},
		{"inCluster not a bool", "kubernetes:\n  inCluster: maybe", []want{{19, "kubernetes.kubeconfig", "is required"}, {20, "kubernetes.inCluster", "not true or false"}}},
		{"unknown field", "kubernetes:\n  kubeconfig: kc\n  kubeConfig: kc",
			[]want{{21, "kubernetes.kubeConfig", `did you mean "kubeconfig"`}}},
		{"not a mapping", "kubernetes: yes", []want{{19, "kubernetes", "want a mapping"}, {19, "kubernetes.kubeconfig", "is required"}}},
		{"list value", "kubernetes:\n  kubeconfig: [a, b]", []want{{20, "kubernetes.kubeconfig", "want a single value"}, {20, "kubernetes.kubeconfig", "is required"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseFixture(t, kubeAt(tc.section))
			if err == nil {
				t.Fatal("accepted")
			}
			matchErrors(t, asList(t, err), tc.want)
		})
	}
}

// TestKubernetesCheck: check on the gateway reports a kubeconfig it
// cannot read, naming the field and line; away from it, it does not look.
func TestKubernetesCheck(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.kubeconfig")
	c := mustParse(t, kubeAt("kubernetes:\n  kubeconfig: "+missing))
	readKey := func(string) ([]byte, error) { return nil, nil }
	if problems, _ := Check(c, CheckOptions{SkipPrivateKey: true}); len(problems) != 0 {
		t.Errorf("kubeconfig checked with SkipPrivateKey: %v", problems)
	}
	problems, _ := Check(c, CheckOptions{ReadFile: readKey})
	found := false
	for _, p := range problems {
		if p.Field == "kubernetes.kubeconfig" && p.Line == 20 && strings.Contains(p.Msg, "cannot read the kubeconfig") && strings.Contains(p.Msg, missing) {
			found = true
		}
	}
	if !found {
		t.Errorf("missing kubeconfig not reported: %v", problems)
	}
	if err := os.WriteFile(missing, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	problems, _ = Check(c, CheckOptions{ReadFile: readKey})
	for _, p := range problems {
		if strings.HasPrefix(p.Field, "kubernetes") {
			t.Errorf("readable kubeconfig reported: %v", p)
		}
	}
}

// followFixture splits the fixture into a config that follows a catalog
// (lines 1-18 and the section) and its catalog file (lines 19-54), both
// written to a directory; it returns the config's path and text.
func followFixture(t *testing.T, section string) (path, text, catalog string) {
	t.Helper()
	lines := strings.Split(readFixture(t), "\n")
	text = strings.Join(lines[:18], "\n") + "\n" + section + "\n"
	catalog = strings.Join(lines[18:], "\n")
	dir := t.TempDir()
	path = filepath.Join(dir, fixtureFile)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, DefaultCatalogFile), []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	return path, text, catalog
}

const followSection = "kubernetes:\n  kubeconfig: kc\n  follow: true"

// TestFollowCatalog: with kubernetes.follow the sites come from the
// catalog file beside the config, exactly as if they were inline; the
// hash covers both files.
func TestFollowCatalog(t *testing.T) {
	inline := mustParse(t, nil)
	path, text, catalog := followFixture(t, followSection)
	c, err := testLoader().parse(path, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(c.Sites, inline.Sites) {
		t.Errorf("followed sites differ from inline ones:\n%+v\n%+v", c.Sites, inline.Sites)
	}
	k := c.Kubernetes
	if k.Namespace != DefaultCatalogNamespace || k.CatalogFile != DefaultCatalogFile {
		t.Errorf("defaults: %+v", *k)
	}
	catPath := filepath.Join(filepath.Dir(path), DefaultCatalogFile)
	if c.CatalogPath() != catPath || inline.CatalogPath() != "" {
		t.Errorf("CatalogPath %q (inline %q)", c.CatalogPath(), inline.CatalogPath())
	}
	if c.Hash() == HashData([]byte(text)) || c.HashWith([]byte(text)) != c.Hash() {
		t.Errorf("hash %s does not cover the catalog (HashWith %s)", c.Hash(), c.HashWith([]byte(text)))
	}
	if c.Line("sites[1].gateways[0].endpoint") != 53-18 {
		t.Errorf("line of a catalog field: %d, want %d", c.Line("sites[1].gateways[0].endpoint"), 53-18)
	}
	if err := os.WriteFile(catPath, []byte(catalog+"\n# changed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if c.HashWith([]byte(text)) == c.Hash() {
		t.Error("HashWith did not see the catalog change")
	}

	// An explicit file, absolute or relative.
	other := filepath.Join(t.TempDir(), "cat.yaml")
	if err := os.WriteFile(other, []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = testLoader().parse(path, []byte(text+"  namespace: ns1\n  catalogFile: "+other+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.CatalogPath() != other || c.Kubernetes.Namespace != "ns1" || len(c.Sites) != 2 {
		t.Errorf("catalogFile %s, namespace %s, %d sites", c.CatalogPath(), c.Kubernetes.Namespace, len(c.Sites))
	}
}

// TestFollowRelay: the followed catalog's relay section (the follower
// writes it from the Site's published relay) is the gateway's relay,
// with the defaults of one written in the config; without one the
// config's own relay stays.
func TestFollowRelay(t *testing.T) {
	path, text, catalog := followFixture(t, followSection)
	catPath := filepath.Join(filepath.Dir(path), DefaultCatalogFile)
	if err := os.WriteFile(catPath, []byte(catalog+"\nrelay:\n  listen: 10.0.0.1:8131\n  allowPodCIDRs: true\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := testLoader().parse(path, []byte(text))
	if err != nil {
		t.Fatal(err)
	}
	want := &Relay{Listen: "10.0.0.1:8131", AllowPodCIDRs: true, AllowedPorts: []int{DefaultRelayPort},
		MaxConnections: DefaultRelayMaxConnections, MaxConnectionsPerDestination: DefaultRelayMaxConnectionsPerDest,
		IdleTimeout: DefaultRelayIdleTimeout, HeaderTimeout: DefaultRelayHeaderTimeout}
	if c.Relay == nil {
		t.Fatal("no relay from the catalog")
	}
	want.ListenAddr = c.Relay.ListenAddr
	if !reflect.DeepEqual(c.Relay, want) || c.Relay.ListenAddr.String() != want.Listen {
		t.Errorf("relay %+v, want %+v", *c.Relay, *want)
	}
	if c.Line("relay.allowPodCIDRs") != 40 {
		t.Errorf("line of the catalog's relay field: %d, want 40", c.Line("relay.allowPodCIDRs"))
	}

	// Without a relay in the catalog, the config's own.
	if err := os.WriteFile(catPath, []byte(catalog), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err = testLoader().parse(path, []byte(text+"relay: {listen: 127.0.0.1:8131}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Relay == nil || c.Relay.Listen != "127.0.0.1:8131" {
		t.Errorf("the config's own relay not kept: %+v", c.Relay)
	}
}

// TestFollowErrors: every problem names its file (config or catalog),
// line and field; inline sites beside a followed catalog are refused.
func TestFollowErrors(t *testing.T) {
	path, text, catalog := followFixture(t, followSection)
	catPath := filepath.Join(filepath.Dir(path), DefaultCatalogFile)
	type wantIn struct {
		file  string
		line  int
		field string
		msg   string
	}
	for _, tc := range []struct {
		name          string
		text, catalog string // "" keeps the fixture's; "-" removes the catalog
		want          []wantIn
	}{
		{"inline sites too", text + "sites: []\n", "", []wantIn{{path, 22, "sites", "must not be set with kubernetes.follow: true"}}},
		{"no catalog file", "", "-", []wantIn{
			{path, 2, "site", "is not the name of any site in the followed catalog"},
			{path, 19, "kubernetes.catalogFile", "does not exist: the gateway writes it"},
		}},
		{"catalog without sites", "", "# nothing yet\nsites: []\n", []wantIn{
			{catPath, 2, "sites", "lists no sites"},
			{path, 2, "site", "is not the name of any site"},
		}},
		{"bad catalog value", "", strings.Replace(catalog, "10.244.2.0/24", "10.244.2.0/33", 1), []wantIn{
			{catPath, 25, "sites[0].nodes[1].podCIDR", "is not a CIDR"},
		}},
		{"unknown catalog key", "", catalog + "\nlisten: {}\n", []wantIn{{catPath, 38, "listen", "unknown field"}}},
		{"bad catalog relay", "", catalog + "\nrelay:\n  listen: 10.0.0.1:8131\n  allowedPorts: [70000]\n", []wantIn{
			{catPath, 40, "relay.allowedPorts[0]", "out of range"},
		}},
		{"relay in both", text + "relay: {listen: 127.0.0.1:8131}\n", catalog + "\nrelay: {listen: 10.0.0.1:8131}\n", []wantIn{
			{path, 22, "relay", "must not be set here: the followed catalog " + catPath + " sets this site's relay (line 38"},
		}},
		{"namespace without follow", strings.Replace(readFixture(t), "clampMSS: false\n", "clampMSS: false\nkubernetes: {kubeconfig: kc, namespace: x, catalogFile: y}\n", 1), "", []wantIn{
			{path, 19, "kubernetes.namespace", "only used with kubernetes.follow"},
			{path, 19, "kubernetes.catalogFile", "only used with kubernetes.follow"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			txt := text
			if tc.text != "" {
				txt = tc.text
			}
			switch tc.catalog {
			case "":
				os.WriteFile(catPath, []byte(catalog), 0o644)
			case "-":
				os.Remove(catPath)
			default:
				os.WriteFile(catPath, []byte(tc.catalog), 0o644)
			}
			_, err := testLoader().parse(path, []byte(txt))
			if err == nil {
				t.Fatal("accepted")
			}
			got := asList(t, err).sorted()
			ok := len(got) == len(tc.want)
			for i := 0; ok && i < len(got); i++ {
				e, w := got[i], tc.want[i]
				ok = e.File == w.file && e.Line == w.line && e.Field == w.field && strings.Contains(e.Msg, w.msg)
			}
			if !ok {
				t.Errorf("got problems:\n%v\nwant:\n%v", got, tc.want)
			}
		})
	}
}

// ipCatalog is a followed catalog whose endpoints need no resolver.
const ipCatalog = `sites:
  - name: a
    nodeCIDRs: [10.0.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.0.0.10, endpoint: "198.51.100.1:51820", publicKey: SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=}
  - name: b
    nodeCIDRs: [10.1.0.0/16]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 10.1.0.10, endpoint: "203.0.113.7:51821", publicKey: fqE938us2KE1Qt7OiQiGSG+4Ak0NPMf5Xti7TvrWa3M=}
`

// TestCheckWithCatalog: a candidate catalog is checked with the config
// as the reload would, without reading or writing the catalog file;
// address-plan problems name the catalog.
func TestCheckWithCatalog(t *testing.T) {
	path, text, _ := followFixture(t, followSection)
	opts := CheckOptions{SkipPrivateKey: true}
	c, problems, _ := CheckWithCatalog(path, []byte(text), []byte(ipCatalog), opts)
	if len(problems) > 0 {
		t.Fatal(problems)
	}
	if len(c.Sites) != 2 || c.Sites[1].Gateways[0].EndpointAddr.String() != "203.0.113.7:51821" {
		t.Errorf("sites %+v", c.Sites)
	}
	overlap := strings.Replace(ipCatalog, "10.245.0.0/16", "10.244.128.0/17", 1)
	_, problems, _ = CheckWithCatalog(path, []byte(text), []byte(overlap), opts)
	catPath := c.CatalogPath()
	found := false
	for _, p := range problems {
		if p.File == catPath && p.Field == "sites[1].podCIDRs[0]" && p.Line == 9 && strings.Contains(p.Msg, "overlaps") {
			found = true
		}
	}
	if !found {
		t.Errorf("overlap not reported against the catalog: %v", problems)
	}
	// A config without kubernetes ignores the candidate.
	plain := readFixture(t)
	if _, problems, _ := CheckWithCatalog(fixtureFile, []byte(plain), []byte("junk"), opts); len(problems) > 0 && !strings.Contains(problems.Error(), "gw-b.example.net") {
		t.Errorf("plain config: %v", problems)
	}
}

// FuzzCatalog: any catalog bytes are refused or accepted with the
// config, never a panic; an accepted one has the local site.
func FuzzCatalog(f *testing.F) {
	f.Add([]byte(ipCatalog))
	f.Add([]byte("sites: []"))
	f.Add([]byte("sites:\n  - name: a\n    nodes: [{name: n, address: 10.0.0.1, podCIDR: 10.244.1.0/24}]\n"))
	f.Add([]byte("---\n---\n"))
	dir := f.TempDir()
	path := filepath.Join(dir, fixtureFile)
	lines := strings.Split(readFixture(f), "\n")
	text := []byte(strings.Join(lines[:18], "\n") + "\n" + followSection + "\n")
	f.Fuzz(func(t *testing.T, catalog []byte) {
		c, problems, _ := CheckWithCatalog(path, text, catalog, CheckOptions{SkipPrivateKey: true})
		if len(problems) == 0 && (c == nil || c.LocalSite() == nil) {
			t.Fatalf("accepted without the local site: %+v", c)
		}
		for _, p := range problems {
			if p.File != path && p.File != filepath.Join(dir, DefaultCatalogFile) {
				t.Fatalf("problem names file %q: %v", p.File, p)
			}
		}
	})
}

// TestFollowOwnEntry: a followed catalog that does not list this
// gateway yet, or lists an older key for it (a reimaged instance), is a
// warning, not a refusal: the gateway registers its key and endpoint,
// and the controller lists them. Without follow both stay errors.
func TestFollowOwnEntry(t *testing.T) {
	path, text, catalog := followFixture(t, followSection)
	if err := os.WriteFile(filepath.Join(filepath.Dir(path), "kc"), []byte("apiVersion: v1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	keyOpts := func(name string) CheckOptions {
		return CheckOptions{
			Stat: func(string) (fs.FileInfo, error) { return fakeInfo{0o600}, nil },
			ReadFile: func(string) ([]byte, error) {
				if name != "" {
					return []byte(name), nil
				}
				return []byte(keyA1), nil
			},
		}
	}
	// Another key than the catalog lists.
	other := strings.Replace(catalog, "SS8cuFhH/8e7Qnhl9kxegEHsBJmzeh2pRaFbQQKvAn4=", "AQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQEBAQE=", 1)
	notListed := strings.Replace(catalog, "name: gw-a1", "name: gw-a9", 1)
	for _, tc := range []struct {
		name, catalog, warn string
	}{
		{"older key", other, "the followed catalog lists AQEB"},
		{"not listed", notListed, `"gw-a1" is not in the followed catalog's site "a" yet`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l := testLoader()
			l.catalog = []byte(tc.catalog)
			c, err := l.parse(path, []byte(text))
			if err != nil {
				t.Fatal(err)
			}
			problems, warnings := Check(c, keyOpts(""))
			if len(problems) > 0 {
				t.Fatalf("refused: %v", problems)
			}
			if !strings.Contains(warnings.Error(), tc.warn) {
				t.Errorf("warnings %v, want %q", warnings, tc.warn)
			}
		})
	}
	// The same catalogs inline, without follow: refused.
	inline := strings.Join(strings.Split(readFixture(t), "\n")[:18], "\n") + "\n"
	if c, err := testLoader().parse(fixtureFile, []byte(inline+other)); err != nil {
		t.Fatal(err)
	} else if problems, _ := Check(c, keyOpts("")); !strings.Contains(problems.Error(), "privateKeyFile") {
		t.Errorf("inline, older key: %v", problems)
	}
	if _, err := testLoader().parse(fixtureFile, []byte(inline+notListed)); err == nil || !strings.Contains(err.Error(), `"gw-a1" is not a gateway of site "a"`) {
		t.Errorf("inline, not listed: %v", err)
	}
}
