//go:build linux

package daemon

import (
	"net"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// TestRunRepairsDeletedRoute: a running gateway puts back a tunnel route
// deleted under it at once, from the route notification, not at the next
// full check (30 s before; a 10-minute backstop now). It runs the daemon
// in a private network namespace (root); the whole test stays on one
// locked thread there, and Run, which creates the TUN, the socket and the
// route state on its calling thread, runs on another thread moved into
// the same namespace.
func TestRunRepairsDeletedRoute(t *testing.T) {
	ns := enterNetns(t)
	defer runInNetns(t, ns, newLabAB(t).path)()
	tun, err := netlink.LinkByName("bh-a")
	if err != nil {
		t.Fatal(err)
	}
	_, dst, _ := net.ParseCIDR("10.102.0.0/16")
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
