//go:build linux

package udp

import (
	"os"
	"os/exec"
	"runtime"
	"testing"

	"golang.org/x/sys/unix"
)

// ownNetns moves the test goroutine's thread into a network namespace of
// its own, brings lo up and runs each `ip` command (argument lists) in
// it. The thread is never unlocked: the runtime discards it, and the
// unnamed namespace with it, when the test returns, so nothing is left to
// delete by name. Sockets opened by the test goroutine afterwards live in
// the namespace; so do the commands, forked from the locked thread.
func ownNetns(t *testing.T, cmds ...[]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root; CI runs as root")
		}
		t.Skip("needs root")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Skipf("unshare(CLONE_NEWNET): %v", err)
	}
	ip(t, "link", "set", "lo", "up")
	for _, args := range cmds {
		ip(t, args...)
	}
}

// ip runs the ip command in the calling thread's namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}
