//go:build linux

package tun

import (
	"os"
	"os/exec"
	"runtime"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// enterNetns moves the calling test goroutine into a fresh, private network
// namespace. The goroutine stays locked to its OS thread and never unlocks,
// so the runtime discards the thread (and with it the namespace, once the
// devices opened in it are closed) when the test returns. Sockets, TUN
// devices and child processes (ip) created from this goroutine live in the
// namespace; other goroutines stay outside but may use the descriptors.
func enterNetns(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root; CI runs as root")
		}
		t.Skip("needs root")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skipf("no TUN support: %v", err)
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("needs the ip command")
	}
	runtime.LockOSThread()
	if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
		t.Skipf("unshare(CLONE_NEWNET): %v", err)
	}
}

// ip runs the ip command inside the test's namespace.
func ip(t *testing.T, args ...string) {
	t.Helper()
	out, err := exec.Command("ip", args...).CombinedOutput()
	if err != nil {
		t.Fatalf("ip %s: %v\n%s", strings.Join(args, " "), err, out)
	}
}
