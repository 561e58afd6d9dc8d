package docgen

import (
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the generated pages of docs/reference")

// root is the module root, from this package's directory.
const root = "../.."

// refPath is a page of docs/reference.
func refPath(name string) string { return filepath.Join(root, "docs", "reference", name) }

// TestReferenceConfig holds docs/reference/config.md to the config's Go
// types, their doc comments, config.FieldRules and the restart-only
// fields of the reload.
func TestReferenceConfig(t *testing.T) {
	fields, err := ConfigFields(root)
	if err != nil {
		t.Fatal(err)
	}
	restart, err := RestartOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	known := map[string]bool{}
	for _, f := range fields {
		known[f.Path] = true
	}
	for _, p := range restart {
		if !known[p] {
			t.Errorf("restartOnly compares %q, which is not a config field", p)
		}
	}
	golden.Check(t, refPath("config.md"), ConfigReference(fields, restart), *update)
}

// TestReferenceExample: docs/reference/bridgehead.yaml passes `bridgehead
// check --skip-private-key` with no problem and no warning, and sets
// every field of the config.
func TestReferenceExample(t *testing.T) {
	path := refPath("bridgehead.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	_, problems, warnings := config.CheckData(path, data, config.CheckOptions{SkipPrivateKey: true})
	for _, p := range append(problems, warnings...) {
		t.Errorf("the example is not clean: %v", p)
	}
	missing, err := MissingFromExample(data)
	if err != nil {
		t.Fatal(err)
	}
	if len(missing) > 0 {
		t.Errorf("the example leaves out: %s", strings.Join(missing, ", "))
	}
}

// TestMissingFromExample: the completeness walk finds a field left out
// at the top, in a section, in list items, and takes a commented field.
func TestMissingFromExample(t *testing.T) {
	full, err := os.ReadFile(refPath("bridgehead.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name, drop, want string
	}{
		{"top level", "cipher: aesgcm\n", "cipher"},
		{"in a section", "  quiet: 2s\n", "drain.quiet"},
		{"in every list item", "        previousKeyExpires: 2030-01-02T15:04:05Z\n", "sites[].gateways[].previousKeyExpires"},
		{"a commented field", "  #catalogFile: catalog.yaml\n", "kubernetes.catalogFile"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(string(full), tt.drop) {
				t.Fatalf("the example has no line %q", tt.drop)
			}
			missing, err := MissingFromExample([]byte(strings.Replace(string(full), tt.drop, "", 1)))
			if err != nil {
				t.Fatal(err)
			}
			if strings.Join(missing, ",") != tt.want {
				t.Errorf("missing %v, want [%s]", missing, tt.want)
			}
		})
	}
}

// TestReferenceMetrics holds docs/reference/metrics.md to the metrics
// the code declares.
func TestReferenceMetrics(t *testing.T) {
	ms, err := Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(ms) < 50 {
		t.Fatalf("found %d metrics; the scanner lost track of the declarations", len(ms))
	}
	golden.Check(t, refPath("metrics.md"), MetricsReference(ms), *update)
}

// TestReferenceLogs holds docs/reference/logs.md to the log calls of
// the gateway's packages.
func TestReferenceLogs(t *testing.T) {
	pkgs, err := GatewayPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"daemon", "router", "udp", "tun"} {
		if !slices.Contains(pkgs, want) {
			t.Fatalf("the gateway's packages %v lack %s", pkgs, want)
		}
	}
	events, err := LogEvents(root, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	run, err := CommandLogEvents(root, "cmd/bridgehead", "setupRun")
	if err != nil {
		t.Fatal(err)
	}
	events = append(run, events...)
	if len(events) < 20 {
		t.Fatalf("found %d log events; the scanner lost track of the log calls", len(events))
	}
	golden.Check(t, refPath("logs.md"), LogsReference(events, pkgs), *update)
}

// TestReferenceCRD holds docs/reference/crd.md to the CRDs' schemas.
func TestReferenceCRD(t *testing.T) {
	crds, err := CRDs(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(crds) < 2 {
		t.Fatalf("found %d CRDs in deploy/kubernetes, want Site and Gateway at least", len(crds))
	}
	golden.Check(t, refPath("crd.md"), CRDReference(crds), *update)
}

// TestReferenceDocsAgree holds the hand-written docs to the code: the
// state names they use, the metrics, labels and help texts they quote,
// and their lists of restart-only fields.
func TestReferenceDocsAgree(t *testing.T) {
	files, err := DocFiles(root)
	if err != nil {
		t.Fatal(err)
	}
	paras, err := ReadParagraphs(root, files)
	if err != nil {
		t.Fatal(err)
	}
	states, err := StateNames(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range CheckStates(paras, states) {
		t.Error(p)
	}
	ms, err := Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range CheckMetricMentions(f, string(data), ms) {
			t.Error(p)
		}
	}
	fields, err := ConfigFields(root)
	if err != nil {
		t.Fatal(err)
	}
	restart, err := RestartOnly(root)
	if err != nil {
		t.Fatal(err)
	}
	links, err := CheckReferenceLinks(root, append(files, "docs/reference/README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range links {
		t.Error(p)
	}
	found, problems := CheckRestartLists(paras, fields, restart)
	for _, p := range problems {
		t.Error(p)
	}
	if found == 0 {
		t.Error("no doc lists the restart-only fields (docs/operations/upgrades.md did)")
	}
}
