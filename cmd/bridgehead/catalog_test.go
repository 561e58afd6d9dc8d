package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestCatalogCommands: a config's catalog goes to resources and back in
// one step each, `check` accepts the resources, and a bad resource file is
// refused with file:line and nothing on stdout.
func TestCatalogCommands(t *testing.T) {
	cfg, _ := cliFixture(t)
	dir := filepath.Dir(cfg)
	code, res, stderr := runCLI(t, "", "catalog", "to-resources", "-c", cfg)
	if code != 0 {
		t.Fatalf("to-resources: exit %d: %s", code, stderr)
	}
	for _, want := range []string{"kind: Site", "name: site-a", "kind: Gateway", "name: site-b.gw-b1", "podBlockSize: 24"} {
		if !strings.Contains(res, want) {
			t.Errorf("to-resources output lacks %q:\n%s", want, res)
		}
	}
	resFile := filepath.Join(dir, "resources.yaml")
	if err := os.WriteFile(resFile, []byte(res), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, out, stderr := runCLI(t, "", "check", "--config", resFile); code != 0 || !strings.Contains(out, "ok: resources of 2 sites, 2 gateways") {
		t.Errorf("check resources: exit %d\n%s%s", code, out, stderr)
	}

	code, merged, stderr := runCLI(t, "", "catalog", "from-resources", "-f", resFile, "-c", cfg)
	if code != 0 {
		t.Fatalf("from-resources: exit %d: %s", code, stderr)
	}
	mergedFile := filepath.Join(dir, "merged.yaml")
	if err := os.WriteFile(mergedFile, []byte(merged), 0o600); err != nil {
		t.Fatal(err)
	}
	orig, err := config.Load(cfg)
	if err != nil {
		t.Fatal(err)
	}
	back, err := config.Load(mergedFile)
	if err != nil {
		t.Fatalf("merged config: %v\n%s", err, merged)
	}
	if back.Site != orig.Site || back.Gateway != orig.Gateway || back.PrivateKeyFile != orig.PrivateKeyFile || back.Hash() == "" {
		t.Errorf("merged config lost its identity: %+v", back)
	}
	if len(back.Sites) != 2 || back.Sites[1].Gateways[0].PublicKey != orig.Sites[1].Gateways[0].PublicKey {
		t.Errorf("merged sites %+v, want %+v", back.Sites, orig.Sites)
	}

	code, alone, stderr := runCLI(t, "", "catalog", "from-resources", "-f", resFile)
	if code != 0 || !strings.HasPrefix(alone, "sites:\n") {
		t.Errorf("from-resources without a config: exit %d\n%s%s", code, alone, stderr)
	}

	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte(strings.Replace(res, "10.245.0.0/16", "10.244.0.0/16", 1)), 0o600)
	for _, args := range [][]string{{"check", "--config", bad}, {"catalog", "from-resources", "-f", bad}} {
		code, out, stderr := runCLI(t, "", args...)
		if code != 1 || out != "" || !strings.Contains(stderr, bad+":") || !strings.Contains(stderr, "Site site-b: spec.podCIDRs[0]: 10.244.0.0/16 overlaps Site site-a: spec.podCIDRs[0]") {
			t.Errorf("%v: exit %d\nstdout: %s\nstderr: %s", args, code, out, stderr)
		}
	}
	if code, _, stderr := runCLI(t, "", "catalog", "sideways"); code != 2 || !strings.Contains(stderr, `unknown subcommand "sideways"`) {
		t.Errorf("unknown subcommand: exit %d: %s", code, stderr)
	}
}
