package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestPackerValidate runs `packer validate` on the Azure image template
// (deploy/packer), then on a copy with the base image's publisher removed,
// which must fail: proof that validate really checks the azure-arm
// builder's settings and not only the syntax.
//
// Debian's packer (1.6) has the azure-arm builder built in and rejects the
// required_plugins block of plugins.pkr.hcl, which packer >= 1.7 needs;
// with it the template is validated alone. Newer packers validate the
// whole directory and need `packer init deploy/packer` first.
func TestPackerValidate(t *testing.T) {
	packer, err := exec.LookPath("packer")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("packer not installed in CI (make deps installs Debian's packer)")
		}
		t.Skip("packer not installed (make deps installs it)")
	}
	out, err := exec.Command(packer, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("packer version: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`v?(\d+)\.(\d+)\.`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("cannot read packer's version from %q", out)
	}
	major, _ := strconv.Atoi(string(m[1]))
	minor, _ := strconv.Atoi(string(m[2]))
	legacy := major == 1 && minor < 7
	t.Logf("packer %s.%s (plugins block %v)", m[1], m[2], !legacy)

	image, err := filepath.Abs("image")
	if err != nil {
		t.Fatal(err)
	}
	// The template names its files relative to itself (../image/...):
	// lay the copy out the same way.
	root := t.TempDir()
	dir := filepath.Join(root, "packer")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(image, filepath.Join(root, "image")); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(root, "bridgehead_1.0.0_amd64.deb")
	if err := os.WriteFile(deb, []byte("stand-in"), 0o644); err != nil {
		t.Fatal(err)
	}
	files := []string{"bridgehead.pkr.hcl"}
	if !legacy {
		files = append(files, "plugins.pkr.hcl")
	}
	src := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(filepath.Join("packer", f))
		if err != nil {
			t.Fatal(err)
		}
		src[f] = string(b)
	}
	validate := func(tmpl string) (string, error) {
		for _, f := range files {
			body := src[f]
			if f == "bridgehead.pkr.hcl" {
				body = tmpl
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(body), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		cmd := exec.Command(packer, "validate",
			"-var", "subscription_id=00000000-0000-0000-0000-000000000000",
			"-var", "resource_group=bridgehead-images",
			"-var", "deb="+deb, dir)
		cmd.Env = append(os.Environ(), "CHECKPOINT_DISABLE=1")
		b, err := cmd.CombinedOutput()
		return string(b), err
	}
	tmpl := src["bridgehead.pkr.hcl"]
	if out, err := validate(tmpl); err != nil {
		t.Fatalf("packer validate: %v\n%s", err, out)
	}
	broken := regexp.MustCompile(`(?m)^\s*image_publisher\s*=.*$`).ReplaceAllString(tmpl, "")
	if broken == tmpl {
		t.Fatal("template has no image_publisher line to remove")
	}
	bout, err := validate(broken)
	if err == nil || !strings.Contains(bout, "image_publisher") {
		t.Errorf("packer validate accepted a template without image_publisher (err %v):\n%s", err, bout)
	}
}
