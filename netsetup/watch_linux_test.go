//go:build linux

package netsetup

import (
	"context"
	"net"
	"net/netip"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// waitRoutes polls the kernel's main table until it is exactly want, and
// returns how long that took.
func waitRoutes(t *testing.T, what string, want []string) time.Duration {
	t.Helper()
	start := time.Now()
	want = union(want)
	for !slices.Equal(kernelRoutes(t, false), want) {
		if time.Since(start) > 5*time.Second {
			checkRoutes(t, what, want)
			t.FailNow()
		}
		time.Sleep(time.Millisecond)
	}
	return time.Since(start)
}

// TestWatchRoutesRepairsDeletions: with WatchRoutes running, a route of
// ours that someone deletes comes back at once, through the route
// notification and without listing the table; routes Apply removed
// itself and routes that were never ours stay deleted (issue #19, 13b).
func TestWatchRoutesRepairsDeletions(t *testing.T) {
	enterNetns(t)
	e := newEnv(t)
	s := newSetup(t)
	baseline := kernelRoutes(t, false)
	w := fullWant()
	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// resync, as the daemon's: Apply the wanted state. It runs on the
	// watch goroutine, on another thread: sysctl writes (through /proc,
	// which follows the thread's namespace) go to a scratch directory.
	s.sysctlPath = t.TempDir()
	var resyncs atomic.Int32
	var cur atomic.Pointer[Want]
	cur.Store(&w)
	if err := s.WatchRoutes(ctx, func() {
		resyncs.Add(1)
		if err := s.Apply(*cur.Load()); err != nil {
			t.Errorf("resync Apply: %v", err)
		}
	}); err != nil {
		t.Fatalf("WatchRoutes: %v", err)
	}
	tun := e.tun.Attrs().Index
	for _, tc := range []struct {
		name  string
		route *netlink.Route
	}{
		{"tunnel ipv4", tunnelRoute(tun, pfx("10.1.0.0/16"))},
		{"tunnel ipv6", tunnelRoute(tun, pfx("fd00:2::/48"))},
		{"via ipv4", viaRoute(pfx("10.100.2.0/24"), addr("192.0.2.12"))},
		{"via ipv6", viaRoute(pfx("fd00:100:1::/64"), addr("2001:db8:ff::11"))},
	} {
		if err := netlink.RouteDel(tc.route); err != nil {
			t.Fatalf("%s: delete %s: %v", tc.name, tc.route, err)
		}
		took := waitRoutes(t, tc.name+" put back", union(baseline, routesOf(w)))
		t.Logf("%s: deleted route back after %v", tc.name, took)
	}
	if n, failed := s.Repairs(); n != 4 || failed != 0 {
		t.Errorf("Repairs() = %d, %d failed; want 4, 0", n, failed)
	}

	// Apply's own removal is not undone.
	less := fullWant()
	less.Tunnel = less.Tunnel[1:]
	less.Via = less.Via[1:]
	cur.Store(&less)
	if err := s.Apply(less); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// A route that was never ours, deleted, stays deleted.
	hand := &netlink.Route{Dst: nlNet("172.16.0.0/12"), Gw: net.ParseIP("192.0.2.99")}
	if err := netlink.RouteAdd(hand); err != nil {
		t.Fatal(err)
	}
	if err := netlink.RouteDel(hand); err != nil {
		t.Fatal(err)
	}
	// A marker repair shows every earlier notification was handled.
	if err := netlink.RouteDel(tunnelRoute(tun, pfx("10.2.0.0/16"))); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, "after Apply removed two routes", union(baseline, routesOf(less)))
	if n, _ := s.Repairs(); n != 5 {
		t.Errorf("Repairs() = %d, want 5 (the marker only)", n)
	}
	if n := resyncs.Load(); n != 0 {
		t.Errorf("%d resyncs without lost notifications", n)
	}

	// The TUN taken down flushes its routes (IPv4 without
	// notifications): the link notification brings it up and back.
	start := time.Now()
	if err := netlink.LinkSetDown(e.tun); err != nil {
		t.Fatal(err)
	}
	waitRoutes(t, "after the TUN went down", union(baseline, routesOf(less)))
	t.Logf("TUN down: up with its routes after %v", time.Since(start))
	if linkByName(t, tunName).Attrs().Flags&net.FlagUp == 0 {
		t.Error("TUN left down")
	}
	if n := resyncs.Load(); n < 1 {
		t.Errorf("%d resyncs after the TUN went down", n)
	}
}

// manyPrefixes is n IPv4 /28s, a catalog of 100k prefixes' worth of
// tunnel routes.
func manyPrefixes(n int) []netip.Prefix {
	ps := make([]netip.Prefix, n)
	for i := range ps {
		ps[i] = netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(i >> 12), byte(i >> 4), byte(i << 4)}), 28)
	}
	return ps
}

// BenchmarkFullCheck100k is what the 30 s route repair cost before
// WatchRoutes, and still costs as the rare backstop: Apply of an unchanged
// catalog of 100k tunnel routes, which lists the whole table.
func BenchmarkFullCheck100k(b *testing.B) {
	enterNetns(b)
	newEnv(b)
	s := newSetup(b)
	w := Want{Link: tunName, Tunnel: manyPrefixes(100_000)}
	if err := s.Apply(w); err != nil {
		b.Fatal(err)
	}
	cpu0 := processCPU(b)
	for b.Loop() {
		if err := s.Apply(w); err != nil {
			b.Fatal(err)
		}
	}
	// The process's user and system time: the kernel's work for the
	// dump counts too.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
}

// processCPU is the process's user plus system CPU time so far.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRepairOne100k: with 100k tunnel routes installed and
// WatchRoutes running, one route deleted and put back: the notification,
// the repair, and nothing that grows with the table.
func BenchmarkRepairOne100k(b *testing.B) {
	enterNetns(b)
	e := newEnv(b)
	s := newSetup(b)
	ps := manyPrefixes(100_000)
	if err := s.Apply(Want{Link: tunName, Tunnel: ps}); err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := s.WatchRoutes(ctx, func() { b.Error("notifications lost") }); err != nil {
		b.Fatal(err)
	}
	tun := e.tun.Attrs().Index
	i := 0
	cpu0 := processCPU(b)
	for b.Loop() {
		before, _ := s.Repairs()
		p := ps[i%len(ps)]
		i++
		if err := netlink.RouteDel(tunnelRoute(tun, p)); err != nil {
			b.Fatal(err)
		}
		for n, _ := s.Repairs(); n == before; n, _ = s.Repairs() {
			time.Sleep(10 * time.Microsecond)
		}
	}
	// An upper bound: it includes the delete and this loop's polling.
	b.ReportMetric(float64(processCPU(b)-cpu0)/float64(b.N), "cpu-ns/op")
	if _, failed := s.Repairs(); failed != 0 {
		b.Errorf("%d repairs failed", failed)
	}
}
