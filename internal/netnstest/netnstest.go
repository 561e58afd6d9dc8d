// Package netnstest gives a test a network namespace of its own with lo
// up, deleted by name when the test ends. Tests that need one are root
// tests: they fail under CI (CI set) without root, as the README's test
// command promises, and skip elsewhere.
package netnstest

import (
	"os"
	"os/exec"
	"strconv"
	"testing"
)

// New creates namespace PREFIX+PID with lo up and returns its name.
func New(t testing.TB, prefix string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CI is set: not skipping)")
		}
		t.Skip("needs root")
	}
	ns := prefix + strconv.Itoa(os.Getpid())
	if out, err := exec.Command("ip", "netns", "add", ns).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add %s: %v %s", ns, err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	if out, err := exec.Command("ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		t.Fatalf("%s: lo up: %v %s", ns, err, out)
	}
	return ns
}
