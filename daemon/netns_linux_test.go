//go:build linux

package daemon

import (
	"context"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// needsNetns skips t unless it can make network namespaces: as root and
// without -short. CI runs as root, so there it fails instead.
func needsNetns(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a network namespace; skipped with -short")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root: this test must run")
		}
		t.Skip("needs root to create a network namespace")
	}
}

// enterNetns moves the test's goroutine, locked to its thread, into a
// new network namespace with lo up, and back when the test ends (the
// namespace goes with its handle). A thread that cannot be moved back
// stays locked, so it dies with the goroutine.
func enterNetns(t *testing.T) netns.NsHandle {
	t.Helper()
	needsNetns(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		if netns.Set(orig) == nil {
			runtime.UnlockOSThread()
		}
		orig.Close()
		t.Fatalf("new netns: %v", err)
	}
	t.Cleanup(func() {
		err := netns.Set(orig)
		ns.Close()
		orig.Close()
		if err != nil {
			t.Errorf("restore netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	})
	if err := loUp(); err != nil {
		t.Fatal(err)
	}
	return ns
}

// loUp sets lo up in the namespace of the calling thread.
func loUp() error {
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		return err
	}
	return netlink.LinkSetUp(lo)
}

// goRunIn runs the daemon with o on a thread of its own locked into ns,
// or into a new namespace with lo up when ns is netns.None() (Run
// creates the TUN, the sockets and the route state on its calling
// thread), and sends what Run returns. The thread ends with the
// goroutine.
func goRunIn(ctx context.Context, ns netns.NsHandle, o Options) <-chan error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked
		if err := joinNetns(ns); err != nil {
			done <- err
			return
		}
		done <- Run(ctx, o)
	}()
	return done
}

// joinNetns moves the calling thread into ns, or into a new namespace
// with lo up when ns is netns.None().
func joinNetns(ns netns.NsHandle) error {
	if ns.IsOpen() {
		return netns.Set(ns)
	}
	fresh, err := netns.New()
	if err != nil {
		return err
	}
	defer fresh.Close() // the thread keeps it
	return loUp()
}

// runInNetns runs the daemon from path in ns (goRunIn: netns.None() for
// a new one) until it is ready, and returns the function that stops it
// and checks that Run returned nil.
func runInNetns(t *testing.T, ns netns.NsHandle, path string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := goRunIn(ctx, ns, Options{ConfigPath: path, Ready: func() { close(ready) }})
	stop = func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		stop()
		t.Fatal("gateway not ready")
	}
	return stop
}
