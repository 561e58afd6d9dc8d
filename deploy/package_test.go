package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestBuildDeb builds the package the way a release does (the script runs
// go build), checks its contents, then installs it into a scratch root
// with dpkg --root to run the maintainer scripts.
func TestBuildDeb(t *testing.T) {
	if _, err := exec.LookPath("dpkg-deb"); err != nil {
		t.Skip("dpkg-deb not installed")
	}
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	out := t.TempDir()
	cmd := exec.Command("./package/build-deb.sh", "-o", out, "-v", "v1.2.3-rc1")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("build-deb.sh: %v\n%s", err, b)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	deb := lines[len(lines)-1]
	arch := strings.TrimSpace(run(t, "dpkg", "--print-architecture"))
	if want := filepath.Join(out, "bridgehead_1.2.3+rc1_"+arch+".deb"); deb != want {
		t.Fatalf("script printed %q, want %q", deb, want)
	}

	fields := map[string]string{"Package": "bridgehead", "Version": "1.2.3+rc1", "Architecture": arch}
	for k, want := range fields {
		if got := strings.TrimSpace(run(t, "dpkg-deb", "-f", deb, k)); got != want {
			t.Errorf("control %s = %q, want %q", k, got, want)
		}
	}

	// dpkg-deb -c lists "perms owner/group size date time ./path", and
	// "... ./path -> target" for a symbolic link.
	listing := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(run(t, "dpkg-deb", "-c", deb)), "\n") {
		l, _, _ = strings.Cut(l, " -> ")
		f := strings.Fields(l)
		listing[strings.TrimPrefix(strings.TrimSuffix(f[len(f)-1], "/"), ".")] = f[0] + " " + f[1]
	}
	for path, want := range map[string]string{
		"/usr/bin/bridgehead":                           "-rwxr-xr-x root/root",
		"/usr/bin/kubectl-bridgehead":                   "lrwxrwxrwx root/root",
		"/lib/systemd/system/bridgehead.service":        "-rw-r--r-- root/root",
		"/etc/bridgehead":                               "drwx------ root/root",
		"/etc/bridgehead/bridgehead.yaml.example":       "-rw-r--r-- root/root",
		"/usr/share/doc/bridgehead/README.md":           "-rw-r--r-- root/root",
		"/usr/share/doc/bridgehead/copyright":           "-rw-r--r-- root/root",
		"/usr/share/doc/bridgehead/changelog.gz":        "-rw-r--r-- root/root",
		"/usr/share/man/man8/bridgehead.8.gz":           "-rw-r--r-- root/root",
		"/usr/share/lintian/overrides/bridgehead":       "-rw-r--r-- root/root",
		"/usr/lib/sysctl.d/60-bridgehead.conf":          "-rw-r--r-- root/root",
		"/usr/lib/tmpfiles.d/bridgehead.conf":           "-rw-r--r-- root/root",
		"/usr/libexec/bridgehead/bridgehead-keygen":     "-rwxr-xr-x root/root",
		"/lib/systemd/system/bridgehead-keygen.service": "-rw-r--r-- root/root",
	} {
		if got := listing[path]; got != want {
			t.Errorf("%s: %q, want %q", path, got, want)
		}
	}
	if got := strings.TrimSpace(run(t, "dpkg-deb", "-I", deb, "conffiles")); got != "/etc/bridgehead/bridgehead.yaml.example" {
		t.Errorf("conffiles = %q, want the example config", got)
	}

	// Lintian at its most pedantic: no error, no warning, no pedantic
	// tag beyond the overrides the package explains.
	if lintian, err := exec.LookPath("lintian"); err == nil {
		b, err := exec.Command(lintian, "--pedantic", "--fail-on", "error,warning,pedantic", deb).CombinedOutput()
		if err != nil {
			t.Errorf("lintian: %v\n%s", err, b)
		}
	} else if os.Getenv("CI") != "" {
		t.Error("lintian not installed in CI (make deps installs it)")
	}
	if man := run(t, "sh", "-c", "dpkg-deb --fsys-tarfile "+deb+" | tar -xOf - ./usr/share/man/man8/bridgehead.8.gz | gzip -dc"); !strings.Contains(man, "genkey") || !strings.Contains(man, "routes") {
		t.Errorf("manual page does not carry the --help text:\n%s", man)
	}

	if _, err := exec.LookPath("dpkg"); err != nil {
		return
	}
	// Install into a scratch root. /etc/bridgehead exists beforehand with
	// loose permissions, as cloud-init's write_files leaves it: the first
	// install must tighten it.
	root := t.TempDir()
	for _, d := range []string{"var/lib/dpkg/info", "var/lib/dpkg/updates"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "var/lib/dpkg/status"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(root, "etc/bridgehead"), 0o755); err != nil {
		t.Fatal(err)
	}
	run(t, "dpkg", "--root="+root, "--force-script-chrootless", "--force-not-root", "--log=/dev/null", "--force-depends", "--install", deb)
	fi, err := os.Stat(filepath.Join(root, "etc/bridgehead"))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o700 {
		t.Errorf("/etc/bridgehead after install: %v, want 0700", fi.Mode().Perm())
	}
	if v := run(t, filepath.Join(root, "usr/bin/bridgehead"), "version"); !strings.Contains(v, "1.2.3+rc1") {
		t.Errorf("installed binary says %q, want version 1.2.3+rc1", v)
	}
	run(t, "dpkg", "--root="+root, "--force-script-chrootless", "--force-not-root", "--log=/dev/null", "--remove", "bridgehead")
	if _, err := os.Stat(filepath.Join(root, "usr/bin/bridgehead")); !os.IsNotExist(err) {
		t.Errorf("binary after remove: %v", err)
	}
}

func run(t *testing.T, name string, args ...string) string {
	t.Helper()
	b, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, b)
	}
	return string(b)
}

// The shipped example must be a config `bridgehead check` accepts.
func TestExampleConfig(t *testing.T) {
	cfg, err := config.Load("package/bridgehead.yaml.example")
	if err != nil {
		t.Fatal(err)
	}
	problems, warnings := config.Check(cfg, config.CheckOptions{SkipPrivateKey: true})
	if len(problems) > 0 {
		t.Errorf("example config: %v", problems)
	}
	for _, w := range warnings {
		t.Logf("warning: %v", w)
	}
	if cfg.Listen != "0.0.0.0:51820" {
		t.Errorf("example listens on %s; the unit, NSG and docs assume :51820", cfg.Listen)
	}
}

// The script's Debian version mangling, run through bash.
func TestDebVersion(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	src, err := os.ReadFile("package/build-deb.sh")
	if err != nil {
		t.Fatal(err)
	}
	// Extract the block between `version=${version#v}` and the comment
	// line after it, and run it on each input.
	m := regexp.MustCompile(`(?s)version=\$\{version#v\}.*?tr -cd 'A-Za-z0-9\.\+~'\)`).Find(src)
	if m == nil {
		t.Fatal("version block not found in build-deb.sh")
	}
	tests := []struct{ in, want string }{
		{"v1.2.3", "1.2.3"},
		{"1.2.3-4-gabcdef0", "1.2.3+4+gabcdef0"},
		{"v0.9.0-dirty", "0.9.0+dirty"},
		{"fa5d87a-dirty", "0.0~fa5d87a+dirty"},
		{"dev", "0.0~dev"},
		{"1.0 beta!", "1.0beta"},
	}
	for _, tt := range tests {
		script := "version='" + tt.in + "'\n" + string(m) + "\nprintf %s \"$version\""
		got := run(t, "bash", "-c", script)
		if got != tt.want {
			t.Errorf("version %q -> %q, want %q", tt.in, got, tt.want)
		}
	}
}
