//go:build linux

package daemon

import (
	"context"
	"net"
	"os"
	"runtime"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
)

// TestRunRepairsDeletedRoute: a running gateway puts back a tunnel route
// deleted under it at once, from the route notification, not at the next
// full check (30 s before; a 10-minute backstop now). It runs the daemon
// in a private network namespace (root); the whole test stays on one
// locked thread there, and Run, which creates the TUN, the socket and the
// route state on its calling thread, runs on another thread moved into
// the same namespace.
func TestRunRepairsDeletedRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a network namespace; skipped with -short")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("CI runs as root: this test must run")
		}
		t.Skip("needs root to create a network namespace")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	ns, err := netns.New()
	if err != nil {
		netns.Set(orig)
		t.Fatalf("new netns: %v", err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err) // stay locked: the thread dies with the goroutine
		} else {
			runtime.UnlockOSThread()
		}
		ns.Close()
		orig.Close()
	}()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	k := newLabKeys(t, dir)
	path := k.write(t, dir, "a",
		k.siteYAML("a", "10.1.0.0/24", "10.11.0.0/16", epA.String()),
		k.siteYAML("b", "10.2.0.0/24", "10.12.0.0/16", epB.String()))
	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan struct{}), make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(ns); err != nil {
			done <- err
			return
		}
		done <- Run(ctx, Options{ConfigPath: path, Ready: func() { close(ready) }})
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	}()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("Run: %v", err)
	case <-time.After(10 * time.Second):
		t.Fatal("gateway not ready")
	}
	tun, err := netlink.LinkByName("bh-a")
	if err != nil {
		t.Fatal(err)
	}
	_, dst, _ := net.ParseCIDR("10.12.0.0/16")
	route := &netlink.Route{Dst: dst, LinkIndex: tun.Attrs().Index, Scope: netlink.SCOPE_LINK}
	has := func() bool {
		rs, err := netlink.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{LinkIndex: tun.Attrs().Index}, netlink.RT_FILTER_OIF)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range rs {
			if r.Dst != nil && r.Dst.String() == dst.String() {
				return true
			}
		}
		return false
	}
	if !has() {
		t.Fatalf("no route %s dev bh-a after start", dst)
	}
	for i := range 3 {
		start := time.Now()
		if err := netlink.RouteDel(route); err != nil {
			t.Fatalf("delete %s: %v", dst, err)
		}
		for !has() {
			if time.Since(start) > 5*time.Second {
				t.Fatalf("route %s not put back within 5 s", dst)
			}
			time.Sleep(time.Millisecond)
		}
		t.Logf("run %d: route %s back %v after it was deleted", i+1, dst, time.Since(start))
	}
}
