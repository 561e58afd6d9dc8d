package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
)

const keepalivedPath = "keepalived/keepalived.conf"

// keepalivedCheck runs keepalived's config test on path. keepalived 2.2
// ends its config test with SIGTERM to its own process group whatever it
// found, so the exit status says nothing: the verdict is its report,
// which is empty for a clean file. It runs in a process group of its own.
func keepalivedCheck(t *testing.T, bin, path string) string {
	t.Helper()
	cmd := exec.Command(bin, "--config-test", "-f", path)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.CombinedOutput()
	return strings.TrimSpace(string(out))
}

func TestKeepalivedConfig(t *testing.T) {
	src, err := os.ReadFile(keepalivedPath)
	if err != nil {
		t.Fatal(err)
	}
	conf := string(src)
	// The health check is bridgehead's /readyz on the metrics port, and
	// the instance tracks it.
	if !regexp.MustCompile(`(?m)^\s*script "/usr/bin/curl -fsS -o /dev/null --max-time 2 http://127\.0\.0\.1:9641/readyz"$`).MatchString(conf) {
		t.Error("vrrp_script does not check http://127.0.0.1:9641/readyz with curl -f")
	}
	if !regexp.MustCompile(`(?s)track_script \{\s*bridgehead_ready\s*\}`).MatchString(conf) ||
		!strings.Contains(conf, "vrrp_script bridgehead_ready {") {
		t.Error("the VRRP instance does not track the bridgehead_ready script")
	}
	if !strings.Contains(conf, "enable_script_security") || !strings.Contains(conf, "script_user nobody") {
		t.Error("the check script must run unprivileged (enable_script_security, script_user)")
	}

	bin, err := exec.LookPath("keepalived")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("keepalived not installed in CI (make deps installs it)")
		}
		t.Skip("keepalived not installed (make deps installs it)")
	}
	if out := keepalivedCheck(t, bin, keepalivedPath); out != "" {
		t.Errorf("keepalived --config-test %s:\n%s", keepalivedPath, out)
	}
	// The same check must catch a broken copy.
	for name, broken := range map[string]string{
		"unknown keyword": strings.Replace(conf, "advert_int 1", "advert_intx 1", 1),
		"bad VIP":         strings.Replace(conf, "192.168.40.1/24 dev eth0", "192.168.40.300/24 dev eth0", 1),
	} {
		p := filepath.Join(t.TempDir(), "keepalived.conf")
		if err := os.WriteFile(p, []byte(broken), 0o644); err != nil {
			t.Fatal(err)
		}
		if out := keepalivedCheck(t, bin, p); out == "" {
			t.Errorf("%s: keepalived --config-test reported nothing", name)
		}
	}
}
