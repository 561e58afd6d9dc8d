package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// TestMain lets a test run this binary as the bridgehead command (for the
// tests that need a separate process: other credentials).
func TestMain(m *testing.M) {
	if os.Getenv("BRIDGEHEAD_TEST_CLI") == "1" {
		os.Exit(run(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// cliFixture writes a valid two-site config with its key (mode 0600) and
// returns the config path and the key path.
func cliFixture(t *testing.T) (cfg, key string) {
	t.Helper()
	dir := t.TempDir()
	key = filepath.Join(dir, "a.key")
	if code, _, stderr := runCLI(t, "", "genkey", "-o", key); code != 0 {
		t.Fatalf("genkey: %s", stderr)
	}
	raw, _ := os.ReadFile(key)
	_, pubA, _ := runCLI(t, string(raw), "pubkey")
	_, privB, _ := runCLI(t, "", "genkey")
	_, pubB, _ := runCLI(t, privB, "pubkey")
	cfg = filepath.Join(dir, "bridgehead.yaml")
	text := `site: site-a
gateway: gw-a1
privateKeyFile: a.key
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - {name: gw-a1, address: 10.224.0.4, endpoint: 198.51.100.1:51820, publicKey: ` + strings.TrimSpace(pubA) + `}
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: 203.0.113.7:51820, publicKey: ` + strings.TrimSpace(pubB) + `}
`
	if err := os.WriteFile(cfg, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return cfg, key
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}

// TestCLIGolden: each bad input a newcomer meets gives one clear message;
// the exit code and the exact first line are fixed here.
func TestCLIGolden(t *testing.T) {
	cfg, key := cliFixture(t)
	dir := filepath.Dir(cfg)
	open := filepath.Join(dir, "open.key")
	raw, _ := os.ReadFile(key)
	if err := os.WriteFile(open, raw, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(open, 0o644); err != nil { // whatever the umask
		t.Fatal(err)
	}
	cfgOpen := filepath.Join(dir, "open.yaml")
	text, _ := os.ReadFile(cfg)
	os.WriteFile(cfgOpen, bytes.Replace(text, []byte("privateKeyFile: a.key"), []byte("privateKeyFile: open.key"), 1), 0o600)
	// A DaemonSet's config: another gateway's name, or none, in the file.
	cfgOther := filepath.Join(dir, "other.yaml")
	os.WriteFile(cfgOther, bytes.Replace(text, []byte("gateway: gw-a1\n"), []byte("gateway: gw-elsewhere\n"), 1), 0o600)
	badIndent := filepath.Join(dir, "indent.yaml")
	lines := strings.Split(string(text), "\n")
	lines[10] = "   " + lines[10] // line 11, "nodeCIDRs" of site-b, indented too far
	os.WriteFile(badIndent, []byte(strings.Join(lines, "\n")), 0o600)
	sock := filepath.Join(dir, "none.sock")

	tests := []struct {
		name  string
		args  []string
		stdin string
		code  int
		// first is the exact first line of stderr, or of stdout when
		// stdout is set.
		first  string
		stdout bool
	}{
		{name: "no command", code: 2, first: "usage: bridgehead COMMAND [flags]"},
		{name: "unknown command", args: []string{"nosuch"}, code: 2, first: `bridgehead: unknown command "nosuch"`},
		{name: "mistyped command", args: []string{"chek"}, code: 2, first: `bridgehead: unknown command "chek"; did you mean "check"?`},
		{name: "unknown flag", args: []string{"check", "--bogus"}, code: 2, first: "bridgehead check: flag provided but not defined: -bogus"},
		{name: "flag without value", args: []string{"routes", "--site"}, code: 2, first: "bridgehead routes: flag needs an argument: -site"},
		{name: "stray argument", args: []string{"check", "extra"}, code: 2, first: "bridgehead check: unexpected arguments: extra"},
		{name: "run --help", args: []string{"run", "--help"}, code: 0, stdout: true, first: "usage: bridgehead run --config FILE"},
		{name: "check -h", args: []string{"check", "-h"}, code: 0, stdout: true, first: "usage: bridgehead check --config FILE"},
		{name: "help routes", args: []string{"help", "routes"}, code: 0, stdout: true, first: "usage: bridgehead routes --config FILE --site NAME --format FORMAT"},
		{name: "help", args: []string{"help"}, code: 0, stdout: true, first: "usage: bridgehead COMMAND [flags]"},
		{name: "help unknown", args: []string{"help", "nosuch"}, code: 2,
			first: `bridgehead help: unknown command "nosuch" (commands: run, check, catalog, gateway, routes, node, status, verify, controller, genkey, rotate-key, pubkey, version, help)`},
		{name: "controller lease timings", args: []string{"controller", "--kubeconfig", cfg, "--retry-period", "20s"}, code: 2,
			first: "bridgehead controller: want --retry-period < --renew-deadline < --lease-duration, got 20s, 10s, 15s"},
		{name: "controller renew deadline too close to the lease", args: []string{"controller", "--kubeconfig", cfg, "--renew-deadline", "14s"}, code: 2,
			first: "bridgehead controller: want --renew-deadline + --retry-period + 1s <= --lease-duration (a leader that cannot renew leads on that long after its last renewal), got 14s + 500ms + 1s > 15s"},
		{name: "controller lease in part seconds", args: []string{"controller", "--kubeconfig", cfg, "--lease-duration", "15500ms"}, code: 2,
			first: "bridgehead controller: --lease-duration 15.5s: want whole seconds (the Lease records seconds)"},
		{name: "controller bad kubeconfig", args: []string{"controller", "--kubeconfig", filepath.Join(dir, "none.kubeconfig"), "--metrics-listen", ""}, code: 1,
			first: "bridgehead controller: --kubeconfig " + filepath.Join(dir, "none.kubeconfig") + ": stat " + filepath.Join(dir, "none.kubeconfig") + ": no such file or directory"},
		{name: "routes unknown site", args: []string{"routes", "--config", cfg, "--site", "nosuch"}, code: 1,
			first: "bridgehead routes: " + cfg + `: no site "nosuch"; the sites are site-a, site-b`},
		{name: "routes unknown format", args: []string{"routes", "--config", cfg, "--format", "iptables"}, code: 1,
			first: `bridgehead routes: unknown format "iptables" (want one of azure, ip, json, netplan, networkd)`},
		{name: "status without a gateway", args: []string{"status", "--socket", sock}, code: 1,
			first: "bridgehead status: no control socket at " + sock + ": is bridgehead running? (if its config sets controlSocket, pass that with --socket PATH)"},
		{name: "check key readable by others", args: []string{"check", "--config", cfgOpen}, code: 1,
			first: cfgOpen + ":3: privateKeyFile: " + open + " has mode 0644: group or others can access the private key; run chmod 600 " + open},
		{name: "check skips the key", args: []string{"check", "--config", cfgOpen, "--skip-private-key"}, code: 0, stdout: true,
			first: cfgOpen + ": ok: site site-a, gateway gw-a1, 2 sites, 2 gateways, config "},
		{name: "check as another gateway", args: []string{"check", "--config", cfgOpen, "--skip-private-key", "--gateway", "gw-nope"}, code: 1,
			first: cfgOpen + `:2: gateway: "gw-nope" is not a gateway of site "site-a"`},
		{name: "check with --gateway", args: []string{"check", "--config", cfgOther, "--skip-private-key", "--gateway", "gw-a1"}, code: 0, stdout: true,
			first: cfgOther + ": ok: site site-a, gateway gw-a1, 2 sites, 2 gateways, config "},
		{name: "check bad indentation", args: []string{"check", "--config", badIndent}, code: 1,
			first: badIndent + ":11: invalid YAML: mapping values are not allowed in this context"},
		{name: "check missing file", args: []string{"check", "--config", filepath.Join(dir, "nope.yaml")}, code: 1,
			first: "bridgehead check: config file " + filepath.Join(dir, "nope.yaml") + " does not exist"},
		{name: "routes missing file", args: []string{"routes", "--config", filepath.Join(dir, "nope.yaml")}, code: 1,
			first: "bridgehead routes: config file " + filepath.Join(dir, "nope.yaml") + " does not exist"},
		{name: "genkey over a key", args: []string{"genkey", "-o", key}, code: 1,
			first: "bridgehead genkey: " + key + " already exists; not overwriting a private key (--force replaces it, and the old key is lost)"},
		{name: "genkey --force alone", args: []string{"genkey", "--force"}, code: 2, first: "bridgehead genkey: --force and --keep only apply with -o FILE"},
		{name: "genkey --keep --force", args: []string{"genkey", "-o", key, "--keep", "--force"}, code: 2, first: "bridgehead genkey: --force and --keep contradict each other"},
		{name: "pubkey garbage", args: []string{"pubkey"}, stdin: "not a key", code: 1,
			first: "bridgehead pubkey: reading a private key from stdin: private key is not valid standard base64: illegal base64 data at input byte 3"},
		{name: "run bad log level", args: []string{"run", "--log-level", "loud"}, code: 2,
			first: `bridgehead run: --log-level "loud": want debug, info, warn or error`},
		{name: "verify --on elsewhere", args: []string{"verify", "--config", cfg, "--on", "router"}, code: 2,
			first: `bridgehead verify: --on "router": want gateway, node or pod`},
		{name: "verify pod flags on a gateway", args: []string{"verify", "--config", cfg, "--pod", "10.244.1.2"}, code: 2,
			first: "bridgehead verify: --site, --pod, --service, --dns, --egress, --callback-relay and --node-address go with --on node or --on pod"},
		{name: "verify --on pod --target", args: []string{"verify", "--config", cfg, "--on", "pod", "--target", "10.0.0.1"}, code: 2,
			first: "bridgehead verify: --target and --socket go with --on gateway"},
		{name: "verify --on node unknown site", args: []string{"verify", "--config", cfg, "--on", "node", "--site", "site-z"}, code: 2,
			first: `bridgehead verify: --site "site-z": ` + cfg + " lists no such site"},
		{name: "verify --collect with checks", args: []string{"verify", "--config", cfg, "--collect", "--on", "pod"}, code: 2,
			first: "bridgehead verify: --collect reads the published reports; it runs no check (no --on, --report or check flags)"},
		{name: "verify --report on a gateway", args: []string{"verify", "--config", cfg, "--report"}, code: 2,
			first: "bridgehead verify: --report goes with --on node or --on pod"},
		{name: "verify --collect --format", args: []string{"verify", "--config", cfg, "--collect", "--format", "yaml"}, code: 2,
			first: `bridgehead verify: --format "yaml": want table or json`},
		{name: "verify --service without port", args: []string{"verify", "--on", "pod", "--service", "10.96.0.20"}, code: 2,
			first: `bridgehead verify: invalid value "10.96.0.20" for flag -service: "10.96.0.20" is not ADDR:PORT`},
	}
	if _, err := os.Stat(defaultConfig); errors.Is(err, os.ErrNotExist) {
		tc := tests[0]
		tc.name, tc.args, tc.code = "check without --config", []string{"check"}, 1
		tc.first = "bridgehead check: config file " + defaultConfig + " does not exist (the default path; give the config file with --config FILE)"
		tests = append(tests, tc)
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, stdout, stderr := runCLI(t, tc.stdin, tc.args...)
			got := stderr
			if tc.stdout {
				got = stdout
			}
			if code != tc.code {
				t.Errorf("exit %d, want %d\nstdout: %s\nstderr: %s", code, tc.code, stdout, stderr)
			}
			first := firstLine(got)
			if strings.HasSuffix(tc.first, " ") { // ends in a hash
				if !strings.HasPrefix(first, tc.first) {
					t.Errorf("first line\n%q\nwant prefix\n%q", first, tc.first)
				}
			} else if first != tc.first {
				t.Errorf("first line\n%q\nwant\n%q", first, tc.first)
			}
			if n := strings.Count(stdout+stderr, first); first != "" && n != 1 {
				t.Errorf("%q printed %d times:\n%s%s", first, n, stdout, stderr)
			}
		})
	}
}

// TestHelpShowsFlags: `help COMMAND` and `COMMAND --help` print every flag
// of the command's table entry, the same text, and exit 0.
func TestHelpShowsFlags(t *testing.T) {
	for _, c := range commands() {
		code1, help, _ := runCLI(t, "", "help", c.name)
		code2, dash, _ := runCLI(t, "", c.name, "--help")
		if code1 != 0 || code2 != 0 {
			t.Errorf("%s: help exit %d, --help exit %d", c.name, code1, code2)
		}
		if help != dash {
			t.Errorf("%s: `help %s` and `%s --help` differ:\n%s\n---\n%s", c.name, c.name, c.name, help, dash)
		}
		for _, f := range c.flagNames() {
			if !strings.Contains(help, "  "+f) {
				t.Errorf("help %s does not show %s:\n%s", c.name, f, help)
			}
		}
		if !strings.Contains(help, c.summary) {
			t.Errorf("help %s lacks the summary", c.name)
		}
	}
	_, usage, _ := runCLI(t, "", "help")
	for _, c := range commands() {
		if !strings.Contains(usage, "  "+c.name+" ") {
			t.Errorf("usage does not list %s:\n%s", c.name, usage)
		}
	}
}

// TestGenkeyFile: -o writes mode 0600 whatever the umask, creates a
// missing directory 0700, refuses to overwrite, and --force replaces.
func TestGenkeyFile(t *testing.T) {
	old := unix.Umask(0o022)
	defer unix.Umask(old)
	dir := filepath.Join(t.TempDir(), "etc", "bridgehead")
	key := filepath.Join(dir, "private.key")
	if code, _, stderr := runCLI(t, "", "genkey", "-o", key); code != 0 {
		t.Fatalf("genkey -o: exit %d: %s", code, stderr)
	}
	for path, want := range map[string]os.FileMode{dir: 0o700, key: 0o600} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s: mode %04o, want %04o", path, st.Mode().Perm(), want)
		}
	}
	first, _ := os.ReadFile(key)
	if code, _, _ := runCLI(t, string(first), "pubkey"); code != 0 {
		t.Fatalf("the written key does not parse: %q", first)
	}
	if code, _, _ := runCLI(t, "", "genkey", "-o", key); code != 1 {
		t.Fatalf("overwrite without --force: exit %d", code)
	}
	if again, _ := os.ReadFile(key); !bytes.Equal(again, first) {
		t.Fatal("refused overwrite changed the key")
	}
	// --keep: an existing key stays and the command succeeds (an init
	// container's every start); a missing one is generated.
	if code, _, stderr := runCLI(t, "", "genkey", "-o", key, "--keep"); code != 0 || !strings.Contains(stderr, "keeping it") {
		t.Fatalf("--keep over a key: exit %d: %s", code, stderr)
	}
	if again, _ := os.ReadFile(key); !bytes.Equal(again, first) {
		t.Fatal("--keep changed the key")
	}
	fresh := filepath.Join(t.TempDir(), "k", "gateway.key")
	if code, _, stderr := runCLI(t, "", "genkey", "-o", fresh, "--keep"); code != 0 {
		t.Fatalf("--keep without a key: exit %d: %s", code, stderr)
	}
	if b, _ := os.ReadFile(fresh); len(b) == 0 {
		t.Fatal("--keep without a key wrote none")
	}
	if err := os.Chmod(key, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runCLI(t, "", "genkey", "-o", key, "--force"); code != 0 {
		t.Fatalf("--force: exit %d: %s", code, stderr)
	}
	second, _ := os.ReadFile(key)
	if bytes.Equal(second, first) {
		t.Fatal("--force kept the old key")
	}
	if st, _ := os.Stat(key); st.Mode().Perm() != 0o600 {
		t.Errorf("--force left mode %04o", st.Mode().Perm())
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}
}

func TestCheckPrivileges(t *testing.T) {
	netAdmin := capSet(1) << unix.CAP_NET_ADMIN
	tests := []struct {
		name string
		caps capSet
		err  error
		want error
	}{
		{"none", 0, nil, errPrivileges},
		{"only CAP_BPF", capSet(1) << unix.CAP_BPF, nil, errPrivileges},
		{"CAP_NET_ADMIN", netAdmin, nil, nil},
		{"unknown", 0, errors.New("capget failed"), nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := checkPrivileges(func() (capSet, error) { return tc.caps, tc.err })
			if got != tc.want {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRunWithoutPrivileges: `bridgehead run` without CAP_NET_ADMIN (as
// nobody when the test runs as root, else as the test's own user) prints
// one line saying what it needs and nothing else: no warning about TUN
// fallbacks, no attempt to load anything.
func TestRunWithoutPrivileges(t *testing.T) {
	cfg, _ := cliFixture(t)
	c := cliCommand(t, "run", "--config", cfg)
	if os.Geteuid() == 0 {
		c.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	} else if caps, err := currentCaps(); err == nil && caps.has(unix.CAP_NET_ADMIN) {
		t.Skip("runs with CAP_NET_ADMIN but not as root: cannot drop it")
	}
	checkUnprivilegedRun(t, c)
}

// TestRunRootWithoutNetAdmin: root whose capability bounding set lacks
// CAP_NET_ADMIN (a container, a sandboxed unit) gets the same message.
func TestRunRootWithoutNetAdmin(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to drop a capability from the bounding set; CI runs as root")
		}
		t.Skip("needs root to drop a capability from the bounding set")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("setpriv (util-linux) missing")
		}
		t.Skip("setpriv (util-linux) missing")
	}
	cfg, _ := cliFixture(t)
	self := cliBinary(t)
	c := exec.Command(setpriv, "--bounding-set=-net_admin", "--inh-caps=-net_admin", self, "run", "--config", cfg)
	c.Env = append(os.Environ(), "BRIDGEHEAD_TEST_CLI=1")
	checkUnprivilegedRun(t, c)
}

func checkUnprivilegedRun(t *testing.T, c *exec.Cmd) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	c.Stdout, c.Stderr = &stdout, &stderr
	err := c.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want 1\nstdout: %s\nstderr: %s", err, stdout.String(), stderr.String())
	}
	want := "bridgehead run: " + errPrivileges.Error() + "\n"
	if stderr.String() != want || stdout.Len() != 0 {
		t.Fatalf("stderr:\n%s\nwant exactly:\n%sstdout: %q", stderr.String(), want, stdout.String())
	}
}

// cliBinary copies this test binary where any user can run it.
func cliBinary(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "bridgehead-cli-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src, err := os.Open(self)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	bin := filepath.Join(dir, "bridgehead")
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
	return bin
}

// cliCommand runs this test binary as `bridgehead args...`.
func cliCommand(t *testing.T, args ...string) *exec.Cmd {
	c := exec.Command(cliBinary(t), args...)
	c.Env = append(os.Environ(), "BRIDGEHEAD_TEST_CLI=1")
	c.Dir = "/"
	return c
}

// FuzzResolvConfServer: any resolv.conf gives an address or an error.
func FuzzResolvConfServer(f *testing.F) {
	f.Add("nameserver 10.96.0.10\nsearch default.svc.cluster.local svc.cluster.local\noptions ndots:5\n")
	f.Add("# nothing\nnameserver fd00::a\n")
	f.Add("nameserver\nnameserver ::ffff:10.0.0.1")
	f.Fuzz(func(t *testing.T, conf string) {
		path := filepath.Join(t.TempDir(), "resolv.conf")
		if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
			t.Fatal(err)
		}
		a, err := resolvConfServer(path)
		if err == nil && (!a.IsValid() || a.Is4In6()) {
			t.Fatalf("%q: got %v", conf, a)
		}
	})
}

func TestKubernetesService(t *testing.T) {
	for _, tc := range []struct{ host, port, want string }{
		{"10.0.0.1", "443", "10.0.0.1:443"},
		{"fd00:96::1", "443", "[fd00:96::1]:443"},
		{"", "", "invalid AddrPort"},
		{"kubernetes", "443", "invalid AddrPort"},
		{"10.0.0.1", "", "invalid AddrPort"},
	} {
		if got := kubernetesService(tc.host, tc.port).String(); got != tc.want {
			t.Errorf("%q %q: %s, want %s", tc.host, tc.port, got, tc.want)
		}
	}
}
