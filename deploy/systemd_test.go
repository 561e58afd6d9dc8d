package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/control"
)

const unitPath = "systemd/bridgehead.service"

// unit is a parsed systemd unit file: section -> key -> values in order
// (a key may repeat, e.g. ExecReload).
type unit map[string]map[string][]string

// parseUnit reads the subset of the unit file syntax we use: sections,
// key=value lines, comments. Continuation lines are rejected so a test
// never silently misreads one.
func parseUnit(t *testing.T, path string) unit {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	u := unit{}
	section := ""
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || line[0] == '#' || line[0] == ';':
		case strings.HasSuffix(line, `\`):
			t.Fatalf("%s:%d: continuation lines are not supported by this test", path, n)
		case line[0] == '[' && line[len(line)-1] == ']':
			section = line[1 : len(line)-1]
			if u[section] == nil {
				u[section] = map[string][]string{}
			}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" {
				t.Fatalf("%s:%d: not key=value in a section: %q", path, n, line)
			}
			k = strings.TrimSpace(k)
			u[section][k] = append(u[section][k], strings.TrimSpace(v))
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return u
}

func TestUnitKeys(t *testing.T) {
	u := parseUnit(t, unitPath)
	tests := []struct {
		section, key string
		want         string // the value, or one of the values for repeated keys
	}{
		{"Unit", "After", "network-online.target"},
		{"Unit", "Wants", "network-online.target"},
		{"Service", "Type", "notify"},
		{"Service", "ExecStart", "/usr/bin/bridgehead run --config /etc/bridgehead/bridgehead.yaml"},
		{"Service", "ExecReload", "/bin/kill -HUP $MAINPID"},
		{"Service", "WatchdogSec", "30s"},
		{"Service", "Restart", "on-failure"},
		{"Service", "RuntimeDirectory", "bridgehead"},
		{"Service", "CapabilityBoundingSet", "CAP_NET_ADMIN CAP_BPF CAP_SYS_NICE"},
		{"Service", "SystemCallFilter", "bpf"},
		{"Service", "NoNewPrivileges", "yes"},
		{"Service", "ProtectSystem", "strict"},
		{"Service", "ProtectHome", "yes"},
		{"Service", "PrivateTmp", "yes"},
		{"Service", "ReadWritePaths", "/proc/sys/net"},
		{"Service", "DevicePolicy", "closed"},
		{"Service", "DeviceAllow", "/dev/net/tun rw"},
		{"Service", "LimitNOFILE", "65536"},
		{"Install", "WantedBy", "multi-user.target"},
	}
	for _, tt := range tests {
		got := u[tt.section][tt.key]
		if !slices.Contains(got, tt.want) {
			t.Errorf("[%s] %s = %q, want %q", tt.section, tt.key, got, tt.want)
		}
	}
	// Settings that would break the gateway.
	forbidden := []struct{ section, key, value string }{
		{"Service", "PrivateDevices", "yes"},   // hides /dev/net/tun
		{"Service", "ProcSubset", "pid"},       // hides /proc/sys
		{"Service", "PrivateNetwork", "yes"},   // no network at all
		{"Service", "DynamicUser", "yes"},      // no CAP_NET_ADMIN, no root-owned key
		{"Service", "ProtectSystem", "full"},   // weaker than strict
		{"Service", "Restart", "always"},       // a clean stop must stay stopped
		{"Service", "KillMode", "process"},     // leaves children behind
		{"Service", "NotifyAccess", "all"},     // only the daemon reports status
		{"Service", "RestrictRealtime", "yes"}, // the express lane's threads
	}
	for _, f := range forbidden {
		if slices.Contains(u[f.section][f.key], f.value) {
			t.Errorf("[%s] %s=%s must not be set", f.section, f.key, f.value)
		}
	}
	// A filtered system call must fail with an error, not kill the
	// daemon with SIGSYS.
	if len(u["Service"]["SystemCallFilter"]) > 0 && len(u["Service"]["SystemCallErrorNumber"]) == 0 {
		t.Error("SystemCallFilter without SystemCallErrorNumber")
	}
	// Three capabilities only (network setup, the eBPF programs, the
	// express lane's real-time threads); the tunnel port is unprivileged.
	if caps := u["Service"]["CapabilityBoundingSet"]; len(caps) != 1 || !slices.Equal(strings.Fields(caps[0]), []string{"CAP_NET_ADMIN", "CAP_BPF", "CAP_SYS_NICE"}) {
		t.Errorf("CapabilityBoundingSet = %q, want exactly CAP_NET_ADMIN CAP_BPF CAP_SYS_NICE", caps)
	}
	// The ProtectKernelTunables read-only /proc/sys needs the net subtree
	// re-opened, or enabling forwarding fails.
	if slices.Contains(u["Service"]["ProtectKernelTunables"], "yes") && !slices.Contains(u["Service"]["ReadWritePaths"], "/proc/sys/net") {
		t.Error("ProtectKernelTunables=yes without ReadWritePaths=/proc/sys/net")
	}
}

// The control socket's default path must be inside RuntimeDirectory, or
// `bridgehead status` finds nothing under systemd.
func TestUnitRuntimeDirectoryHoldsControlSocket(t *testing.T) {
	u := parseUnit(t, unitPath)
	rd := u["Service"]["RuntimeDirectory"]
	if len(rd) != 1 || filepath.Join("/run", rd[0]) != filepath.Dir(control.DefaultSocket) {
		t.Errorf("RuntimeDirectory = %q, but control.DefaultSocket is %s", rd, control.DefaultSocket)
	}
}

// TestUnitVerify runs systemd-analyze verify on a copy whose binary path
// points at a stub, since verify insists that ExecStart exists. Any
// diagnostic about the unit fails the test; verify's exit status alone
// ignores unknown keys.
func TestUnitVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("systemd-analyze not installed in CI")
		}
		t.Skip("systemd-analyze not installed")
	}
	for _, u := range []struct{ path, binary string }{
		{unitPath, "/usr/bin/bridgehead"},
		{"systemd/bridgehead-keygen.service", "/usr/libexec/bridgehead/bridgehead-keygen"},
	} {
		t.Run(filepath.Base(u.path), func(t *testing.T) {
			dir := t.TempDir()
			stub := filepath.Join(dir, "bin")
			if err := os.WriteFile(stub, []byte("#!/bin/sh\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			src, err := os.ReadFile(u.path)
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), u.binary) {
				t.Fatalf("%s does not run %s", u.path, u.binary)
			}
			name := filepath.Base(u.path)
			copyPath := filepath.Join(dir, name)
			if err := os.WriteFile(copyPath, []byte(strings.ReplaceAll(string(src), u.binary, stub)), 0o644); err != nil {
				t.Fatal(err)
			}
			out, err := exec.Command(sa, "verify", copyPath).CombinedOutput()
			var diags []string
			for _, l := range strings.Split(string(out), "\n") {
				if strings.Contains(l, name) {
					diags = append(diags, l)
				}
			}
			if err != nil || len(diags) > 0 {
				t.Errorf("systemd-analyze verify: %v\n%s", err, strings.Join(diags, "\n"))
			}
		})
	}
}
