// Package netnstest gives a test a network namespace of its own with lo
// up: New's is named and deleted by name when the test ends, Enter's is
// the test goroutine's thread's own and goes with it. Tests that need
// one are root tests: they fail under CI (CI set) without root, as the
// README's test command promises, and skip elsewhere.
package netnstest

import (
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
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

// Enter moves the calling goroutine's thread into a network namespace of
// its own with lo up, and runs each `ip` command (argument lists) in it.
// The thread is never unlocked: the runtime discards it, and the unnamed
// namespace with it, when the test's goroutine ends, so nothing is left
// to delete by name. Sockets the goroutine opens afterwards live in the
// namespace; so do the commands, forked from the locked thread. Call it
// from the test's own goroutine, first.
func Enter(t testing.TB, cmds ...[]string) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root (CI is set: not skipping)")
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
	IP(t, "link", "set", "lo", "up")
	for _, args := range cmds {
		IP(t, args...)
	}
}

// IP runs the ip command in the calling thread's namespace (Enter's).
func IP(t testing.TB, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		t.Fatalf("ip %v: %v\n%s", args, err, out)
	}
}
