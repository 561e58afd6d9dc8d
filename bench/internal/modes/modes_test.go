package modes

import (
	"os"
	"slices"
	"strings"
	"testing"
)

func TestWgIfname(t *testing.T) {
	for _, p := range []string{"bhb1", "bhb4194304", "bhbverylongprefix1234567890"} {
		for _, s := range []string{"a", "b"} {
			n := wgIfname(p, s)
			if len(n) > 15 || !strings.HasSuffix(n, s) {
				t.Errorf("wgIfname(%q, %q) = %q", p, s, n)
			}
		}
	}
	if wgIfname("bhb42", "a") == wgIfname("bhb43", "a") {
		t.Error("prefixes share an interface name")
	}
}

func TestBridgeheadConfig(t *testing.T) {
	c := BridgeheadConfig("b", "/x/b.key", "chachapoly", 1380, "PUBA", "PUBB")
	for _, want := range []string{"site: site-b\n", "gateway: gw-b1\n", "privateKeyFile: /x/b.key\n", "cipher: chachapoly\n",
		"  mtu: 1380\n", "  listen: 127.0.0.1:9641\n", "endpoint: 203.0.113.1:51820\n        publicKey: PUBA\n", "endpoint: 203.0.113.2:51820\n        publicKey: PUBB\n"} {
		if !strings.Contains(c, want) {
			t.Errorf("config lacks %q:\n%s", want, c)
		}
	}
}

// TestLabCatalogMatches keeps the sites catalog of the benchmark's
// bridgehead config in step with deploy/lab/lab.sh's.
func TestLabCatalogMatches(t *testing.T) {
	raw, err := os.ReadFile("../../../deploy/lab/lab.sh")
	if err != nil {
		t.Fatal(err)
	}
	lab := string(raw)

	// The sites catalog: lab.sh's catalog() heredoc, without the
	// lab-only keepalive lines, against the one BridgeheadConfig writes.
	start := strings.Index(lab, "cat <<YAML\n")
	end := strings.Index(lab, "\nYAML\n")
	if start < 0 || end < start {
		t.Fatal("no catalog heredoc in lab.sh")
	}
	var labSites []string
	for _, l := range strings.Split(lab[start+len("cat <<YAML\n"):end], "\n") {
		if strings.Contains(l, "keepalive:") {
			continue
		}
		l = strings.ReplaceAll(l, "$1", "PUBLIC-A")
		labSites = append(labSites, strings.ReplaceAll(l, "$2", "PUBLIC-B"))
	}
	cfg := BridgeheadConfig("a", "/k/a.key", "aesgcm", 1420, "PUBLIC-A", "PUBLIC-B")
	i := strings.Index(cfg, "sites:\n")
	if i < 0 {
		t.Fatal("no sites in the benchmark's config")
	}
	benchSites := strings.Split(strings.TrimRight(cfg[i:], "\n"), "\n")
	if !slices.Equal(benchSites, labSites) {
		t.Errorf("sites catalogs differ:\nlab.sh:\n%s\nbench:\n%s", strings.Join(labSites, "\n"), strings.Join(benchSites, "\n"))
	}
}

// TestVariantString: the column names of the results.
func TestVariantString(t *testing.T) {
	for _, tc := range []struct {
		v    Variant
		want string
	}{
		{Variant{Mode: Kernel}, "kernel"},
		{Variant{Mode: Bridgehead, Cipher: "aesgcm", ExpressPriority: ExpressDefault}, "bridgehead-aesgcm"},
		{Variant{Mode: Bridgehead, Cipher: "aesgcm"}, "bridgehead-aesgcm-express-off"},
		{Variant{Mode: Bridgehead, Cipher: "aesgcm", Lanes: 2, ExpressPriority: ExpressDefault}, "bridgehead-aesgcm-lanes2"},
		{Variant{Mode: Bridgehead, Cipher: "aesgcm", ExpressPriority: 10}, "bridgehead-aesgcm-rt10"},
		{Variant{Mode: Bridgehead, Cipher: "chachapoly", Lanes: 1, ExpressPriority: 5}, "bridgehead-chachapoly-lanes1-rt5"},
	} {
		if got := tc.v.String(); got != tc.want {
			t.Errorf("%+v: %q, want %q", tc.v, got, tc.want)
		}
	}
}
