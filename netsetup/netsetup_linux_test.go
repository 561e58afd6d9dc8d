//go:build linux

package netsetup

import (
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Every test below runs in a private network namespace and keeps its whole
// body on one locked OS thread: New binds the Setup's netlink sockets to the
// namespace of the thread that calls it, and PathMTU, the sysctl writes in
// Apply and the helpers here all act on the calling thread's namespace.
// netsetup starts no goroutines but WatchRoutes', whose subscription is
// made in the Setup's namespace and whose repairs use the Setup's sockets,
// so nothing escapes to the host namespace.
// Subtests each enter a namespace of their own (t.Run starts a new goroutine).

const (
	tunName  = "bh0"
	lanName  = "lan0"
	peerName = "lan1"
	lanMTU   = 1400
)

var (
	lanAddr4 = netip.MustParsePrefix("192.0.2.1/24")
	lanAddr6 = netip.MustParsePrefix("2001:db8:ff::1/64")
	// marker is the destination of the route watchRoutes adds to know it has
	// seen every earlier route event.
	marker = netip.MustParsePrefix("198.51.100.0/24")
)

// enterNetns moves the calling goroutine, locked to its OS thread, into a
// fresh network namespace. Cleanup returns the thread to the original
// namespace, closes the new one (the kernel destroys it, and every link in
// it, with its last reference) and unlocks the thread.
func enterNetns(t testing.TB) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a network namespace; skipped with -short")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root to create a network namespace; CI runs as root")
		}
		t.Skip("needs root to create a network namespace")
	}
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("get current netns: %v", err)
	}
	ns, err := netns.New()
	if err != nil {
		// netns.New can fail after unshare succeeded; go back if we can.
		if serr := netns.Set(orig); serr == nil {
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
			// Stay locked: the runtime then ends this thread when the
			// goroutine exits instead of reusing it in the wrong namespace.
			t.Errorf("restore original netns: %v", err)
			return
		}
		runtime.UnlockOSThread()
	})
}

// env is the namespace's links: bh0 (a persistent TUN, down, as the daemon
// hands it to Apply) and lan0 (one end of a veth pair, up, MTU 1400, with
// 192.0.2.1/24 and 2001:db8:ff::1/64) for next hops and PathMTU.
type env struct {
	tun, lan, lo netlink.Link
}

func newEnv(t testing.TB) env {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	if err != nil {
		t.Fatalf("lo: %v", err)
	}
	if err := netlink.LinkSetUp(lo); err != nil {
		t.Fatalf("lo up: %v", err)
	}
	if err := netlink.LinkAdd(&netlink.Tuntap{LinkAttrs: netlink.LinkAttrs{Name: tunName}, Mode: netlink.TUNTAP_MODE_TUN}); err != nil {
		t.Fatalf("add TUN %s: %v", tunName, err)
	}
	// Links made from here on get no IPv6 link-local address: its DAD
	// would finish asynchronously and add routes behind the tests' back.
	// (bh0 keeps the default, so Apply's own addr_gen_mode write shows.)
	writeSysctl(t, "net/ipv6/conf/default/addr_gen_mode", "1")
	if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: lanName, MTU: lanMTU}, PeerName: peerName}); err != nil {
		t.Fatalf("add veth: %v", err)
	}
	lan := linkByName(t, lanName)
	for _, l := range []netlink.Link{lan, linkByName(t, peerName)} {
		if err := netlink.LinkSetUp(l); err != nil {
			t.Fatalf("%s up: %v", l.Attrs().Name, err)
		}
	}
	for _, p := range []netip.Prefix{lanAddr4, lanAddr6} {
		a := &netlink.Addr{IPNet: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}}
		if p.Addr().Is6() {
			a.Flags = syscall.IFA_F_NODAD
		}
		if err := netlink.AddrAdd(lan, a); err != nil {
			t.Fatalf("address %s on %s: %v", p, lanName, err)
		}
	}
	waitLANSettled(t)
	return env{tun: linkByName(t, tunName), lan: linkByName(t, lanName), lo: lo}
}

// waitLANSettled waits until the veth has its carrier and the kernel has
// the local route of lanAddr6: the carrier comes up asynchronously, and
// when it does IPv6 re-adds that route, which a test watching route
// events would otherwise see as its own doing.
func waitLANSettled(t testing.TB) {
	t.Helper()
	host := netlink.Route{Table: unix.RT_TABLE_LOCAL, Dst: &net.IPNet{IP: lanAddr6.Addr().AsSlice(), Mask: net.CIDRMask(128, 128)}}
	deadline := time.Now().Add(5 * time.Second)
	for {
		up := linkByName(t, lanName).Attrs().OperState == netlink.OperUp
		local, err := netlink.RouteListFiltered(netlink.FAMILY_V6, &host, netlink.RT_FILTER_TABLE|netlink.RT_FILTER_DST)
		if err == nil && up && len(local) > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: carrier up %v, local route of %s %d (err %v) after 5 s", lanName, up, lanAddr6.Addr(), len(local), err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newSetup returns a Setup in the current namespace, closed at cleanup
// (a second Close, after a test's own, is harmless).
func newSetup(t testing.TB) *Setup {
	t.Helper()
	s, err := New(slog.New(slog.NewTextHandler(t.Output(), nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func linkByName(t testing.TB, name string) netlink.Link {
	t.Helper()
	l, err := netlink.LinkByName(name)
	if err != nil {
		t.Fatalf("link %s: %v", name, err)
	}
	return l
}

func writeSysctl(t testing.TB, name, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+name, []byte(value+"\n"), 0o644); err != nil {
		t.Fatalf("sysctl %s: %v", name, err)
	}
}

func readSysctl(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile("/proc/sys/" + name)
	if err != nil {
		t.Fatalf("sysctl %s: %v", name, err)
	}
	return strings.TrimSpace(string(b))
}

func pfx(s string) netip.Prefix { return netip.MustParsePrefix(s) }
func addr(s string) netip.Addr  { return netip.MustParseAddr(s) }

func nlNet(s string) *net.IPNet {
	p := pfx(s)
	return &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

// routeKey is a main-table route as "DST [via GW] dev NAME [metric N]",
// the metric only when it is not the family's default for a route added
// without one (0 for IPv4, 1024 for IPv6), which is what Apply adds.
func routeKey(r netlink.Route, names map[int]string) string {
	dst := "default"
	if r.Dst != nil {
		dst = r.Dst.String()
	}
	k := dst
	if r.Gw != nil {
		k += " via " + r.Gw.String()
	}
	k += " dev " + names[r.LinkIndex]
	if def := map[int]int{netlink.FAMILY_V4: 0, netlink.FAMILY_V6: 1024}[r.Family]; r.Priority != def {
		k += fmt.Sprintf(" metric %d", r.Priority)
	}
	return k
}

// kernelRoutes reads the main routing table (IPv4 and IPv6) from the
// kernel. With detail it adds scope, protocol, type, metric and flags, for
// before/after comparisons.
func kernelRoutes(t *testing.T, detail bool) []string {
	t.Helper()
	links, err := netlink.LinkList()
	if err != nil {
		t.Fatalf("link list: %v", err)
	}
	names := map[int]string{}
	for _, l := range links {
		names[l.Attrs().Index] = l.Attrs().Name
	}
	routes, err := netlink.RouteListFiltered(netlink.FAMILY_ALL, &netlink.Route{Table: syscall.RT_TABLE_MAIN}, netlink.RT_FILTER_TABLE)
	if err != nil {
		t.Fatalf("route list: %v", err)
	}
	keys := make([]string, 0, len(routes))
	for _, r := range routes {
		k := routeKey(r, names)
		if detail {
			k += fmt.Sprintf(" scope %d proto %d type %d metric %d flags %d mtu %d", r.Scope, r.Protocol, r.Type, r.Priority, r.Flags, r.MTU)
		}
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// routesOf is what w should put in the main table: tunnel prefixes on bh0,
// via prefixes through lan0.
func routesOf(w Want) []string {
	var keys []string
	for _, p := range w.Tunnel {
		keys = append(keys, p.Masked().String()+" dev "+tunName)
	}
	for _, v := range w.Via {
		keys = append(keys, v.Prefix.Masked().String()+" via "+v.Via.String()+" dev "+lanName)
	}
	return keys
}

// union is the sorted, deduplicated union of route key lists.
func union(lists ...[]string) []string {
	var all []string
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.Sort(all)
	return slices.Compact(all)
}

// checkRoutes fails the test if the kernel's main table is not exactly want.
func checkRoutes(t *testing.T, what string, want []string) {
	t.Helper()
	got := kernelRoutes(t, false)
	want = union(want)
	if slices.Equal(got, want) {
		return
	}
	var missing, extra []string
	for _, w := range want {
		if !slices.Contains(got, w) {
			missing = append(missing, w)
		}
	}
	for _, g := range got {
		if !slices.Contains(want, g) {
			extra = append(extra, g)
		}
	}
	t.Errorf("%s: kernel main table\n got:     %q\n want:    %q\n missing: %q\n extra:   %q", what, got, want, missing, extra)
}

// fullWant routes IPv4 and IPv6 prefixes into the TUN and toward next
// hops on lan0.
func fullWant() Want {
	return Want{
		Link: tunName,
		MTU:  1380,
		Tunnel: []netip.Prefix{
			pfx("10.1.0.0/16"), pfx("10.2.0.0/16"),
			pfx("fd00:1::/48"), pfx("fd00:2::/48"),
		},
		Via: []ViaRoute{
			{pfx("10.100.1.0/24"), addr("192.0.2.11")},
			{pfx("10.100.2.0/24"), addr("192.0.2.12")},
			{pfx("fd00:100:1::/64"), addr("2001:db8:ff::11")},
			{pfx("fd00:100:2::/64"), addr("2001:db8:ff::12")},
		},
	}
}

// handRoutes adds routes an operator made by hand: some on the TUN, some
// with the same prefix as a Setup route but another metric and device or
// next hop. It returns their keys.
func handRoutes(t *testing.T, e env, onTUN bool) []string {
	t.Helper()
	routes := []*netlink.Route{
		{Dst: nlNet("172.16.0.0/12"), Gw: net.ParseIP("192.0.2.99")},
		{Dst: nlNet("10.1.0.0/16"), LinkIndex: e.lan.Attrs().Index, Scope: netlink.SCOPE_LINK, Priority: 50},
		{Dst: nlNet("10.100.1.0/24"), Gw: net.ParseIP("192.0.2.99"), Priority: 50},
		{Dst: nlNet("fd00:1::/48"), Gw: net.ParseIP("2001:db8:ff::99"), Priority: 50},
		{Dst: nlNet("fd00:100:1::/64"), Gw: net.ParseIP("2001:db8:ff::99"), Priority: 50},
	}
	keys := []string{
		"172.16.0.0/12 via 192.0.2.99 dev lan0",
		"10.1.0.0/16 dev lan0 metric 50",
		"10.100.1.0/24 via 192.0.2.99 dev lan0 metric 50",
		"fd00:1::/48 via 2001:db8:ff::99 dev lan0 metric 50",
		"fd00:100:1::/64 via 2001:db8:ff::99 dev lan0 metric 50",
	}
	if onTUN {
		routes = append(routes,
			&netlink.Route{Dst: nlNet("10.200.0.0/16"), LinkIndex: e.tun.Attrs().Index, Scope: netlink.SCOPE_LINK},
			&netlink.Route{Dst: nlNet("fd00:200::/48"), LinkIndex: e.tun.Attrs().Index},
			&netlink.Route{Dst: nlNet("10.2.0.0/16"), LinkIndex: e.tun.Attrs().Index, Scope: netlink.SCOPE_LINK, Priority: 50},
		)
		keys = append(keys,
			"10.200.0.0/16 dev bh0",
			"fd00:200::/48 dev bh0",
			"10.2.0.0/16 dev bh0 metric 50",
		)
	}
	for _, r := range routes {
		if err := netlink.RouteAdd(r); err != nil {
			t.Fatalf("hand route %s: %v", r, err)
		}
	}
	return keys
}

func TestApplyInstallsWantedRoutes(t *testing.T) {
	tests := []struct {
		name string
		want Want
		// routes is what the main table must gain, nothing more.
		routes []string
	}{{
		name:   "IPv4 tunnel",
		want:   Want{Link: tunName, Tunnel: []netip.Prefix{pfx("10.1.0.0/16"), pfx("10.2.0.0/24")}},
		routes: []string{"10.1.0.0/16 dev bh0", "10.2.0.0/24 dev bh0"},
	}, {
		name:   "IPv6 tunnel",
		want:   Want{Link: tunName, Tunnel: []netip.Prefix{pfx("fd00:1::/48"), pfx("fd00:2::/64")}},
		routes: []string{"fd00:1::/48 dev bh0", "fd00:2::/64 dev bh0"},
	}, {
		name: "via routes",
		want: Want{Link: tunName, Via: []ViaRoute{
			{pfx("10.100.1.0/24"), addr("192.0.2.11")},
			{pfx("fd00:100:1::/64"), addr("2001:db8:ff::11")},
		}},
		routes: []string{"10.100.1.0/24 via 192.0.2.11 dev lan0", "fd00:100:1::/64 via 2001:db8:ff::11 dev lan0"},
	}, {
		name: "tunnel and via, both families",
		want: fullWant(),
		routes: []string{
			"10.1.0.0/16 dev bh0", "10.2.0.0/16 dev bh0",
			"fd00:1::/48 dev bh0", "fd00:2::/48 dev bh0",
			"10.100.1.0/24 via 192.0.2.11 dev lan0", "10.100.2.0/24 via 192.0.2.12 dev lan0",
			"fd00:100:1::/64 via 2001:db8:ff::11 dev lan0", "fd00:100:2::/64 via 2001:db8:ff::12 dev lan0",
		},
	}, {
		name: "host bits are masked off, duplicates collapse",
		want: Want{Link: tunName,
			Tunnel: []netip.Prefix{pfx("10.1.2.3/16"), pfx("10.1.0.0/16"), pfx("fd00:1::1/48")},
			Via:    []ViaRoute{{pfx("10.100.1.77/24"), addr("192.0.2.11")}},
		},
		routes: []string{"10.1.0.0/16 dev bh0", "fd00:1::/48 dev bh0", "10.100.1.0/24 via 192.0.2.11 dev lan0"},
	}, {
		name:   "nothing wanted",
		want:   Want{Link: tunName},
		routes: nil,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			newEnv(t)
			s := newSetup(t)
			before := kernelRoutes(t, false)
			if err := s.Apply(tc.want); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			checkRoutes(t, "after Apply", union(before, tc.routes))
		})
	}
}

func TestApplyConfiguresLink(t *testing.T) {
	tests := []struct {
		name       string
		mtu        int
		forwarding bool
		wantMTU    int
		wantFwd    string
	}{
		{name: "MTU and forwarding", mtu: 1380, forwarding: true, wantMTU: 1380, wantFwd: "1"},
		{name: "forwarding left alone", mtu: 1420, forwarding: false, wantMTU: 1420, wantFwd: "0"},
		{name: "zero MTU keeps the link's", mtu: 0, forwarding: true, wantMTU: 1500, wantFwd: "1"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			e := newEnv(t)
			writeSysctl(t, "net/ipv4/ip_forward", "0")
			writeSysctl(t, "net/ipv6/conf/all/forwarding", "0")
			if got := e.tun.Attrs().MTU; got != 1500 {
				t.Fatalf("TUN starts with MTU %d, the test assumes 1500", got)
			}
			if got := readSysctl(t, "net/ipv6/conf/"+tunName+"/addr_gen_mode"); got != "0" {
				t.Fatalf("TUN starts with addr_gen_mode %s, the test assumes 0", got)
			}
			s := newSetup(t)
			if err := s.Apply(Want{Link: tunName, MTU: tc.mtu, Forwarding: tc.forwarding, Tunnel: []netip.Prefix{pfx("10.1.0.0/16")}}); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			l := linkByName(t, tunName)
			if got := l.Attrs().MTU; got != tc.wantMTU {
				t.Errorf("TUN MTU = %d, want %d", got, tc.wantMTU)
			}
			if l.Attrs().Flags&net.FlagUp == 0 {
				t.Errorf("TUN is not up after Apply")
			}
			if got := readSysctl(t, "net/ipv6/conf/"+tunName+"/addr_gen_mode"); got != "1" {
				t.Errorf("TUN addr_gen_mode = %s, want 1 (no link-local address)", got)
			}
			for _, f := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
				if got := readSysctl(t, f); got != tc.wantFwd {
					t.Errorf("%s = %s, want %s", f, got, tc.wantFwd)
				}
			}
		})
	}
}

// TestForwardingReadOnly: forwarding already on is not written, so a
// gateway in a container (/proc/sys read-only) starts; off and
// read-only is an error that says so.
func TestForwardingReadOnly(t *testing.T) {
	enterNetns(t)
	newEnv(t)
	for _, tc := range []struct {
		value   string
		wantErr bool
	}{{"1", false}, {"0", true}} {
		dir := t.TempDir()
		if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=64k"); err != nil {
			t.Fatalf("mount tmpfs: %v", err)
		}
		t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
		for _, f := range []string{"net/ipv4/ip_forward", "net/ipv6/conf/all/forwarding"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte(tc.value+"\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("", dir, "", unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("remount read-only: %v", err)
		}
		s := newSetup(t)
		s.sysctlPath = dir
		err := s.Apply(Want{Link: tunName, MTU: 1420, Forwarding: true, Tunnel: []netip.Prefix{pfx("10.1.0.0/16")}})
		if tc.wantErr != (err != nil) || err != nil && !strings.Contains(err.Error(), "enable forwarding") {
			t.Errorf("forwarding %s on a read-only /proc/sys: Apply: %v, want error %v", tc.value, err, tc.wantErr)
		}
	}
}

// routeWatch records route change notifications from the kernel.
type routeWatch struct {
	ch chan netlink.RouteUpdate
}

func watchRoutes(t *testing.T) *routeWatch {
	t.Helper()
	ch := make(chan netlink.RouteUpdate, 64)
	done := make(chan struct{})
	if err := netlink.RouteSubscribe(ch, done); err != nil {
		t.Fatalf("route subscribe: %v", err)
	}
	t.Cleanup(func() {
		close(done)
		for range ch {
		}
	})
	return &routeWatch{ch: ch}
}

// changes adds a marker route and returns every route notification the
// kernel sent before the marker's, that is every route change since the
// watch began. The timeout only guards against a hang; it is not a
// synchronisation point.
func (w *routeWatch) changes(t *testing.T, e env) []string {
	t.Helper()
	m := &netlink.Route{Dst: nlNet(marker.String()), LinkIndex: e.lo.Attrs().Index, Scope: netlink.SCOPE_LINK}
	if err := netlink.RouteAdd(m); err != nil {
		t.Fatalf("marker route: %v", err)
	}
	var got []string
	guard := time.After(time.Minute)
	for {
		select {
		case u, ok := <-w.ch:
			if !ok {
				t.Fatalf("route subscription ended")
			}
			if u.Type == syscall.RTM_NEWROUTE && u.Dst != nil && u.Dst.String() == marker.String() {
				if err := netlink.RouteDel(m); err != nil {
					t.Fatalf("remove marker route: %v", err)
				}
				return got
			}
			got = append(got, fmt.Sprintf("type %d %s", u.Type, u.Route))
		case <-guard:
			t.Fatalf("no notification for the marker route")
		}
	}
}

func TestApplyIdempotent(t *testing.T) {
	enterNetns(t)
	e := newEnv(t)
	s := newSetup(t)
	w := fullWant()
	if err := s.Apply(w); err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	routes := kernelRoutes(t, true)
	link := linkByName(t, tunName).Attrs()
	tunnel, via := s.Routes()

	watch := watchRoutes(t)
	// The same Want again, and the same Want written differently: reordered
	// and with host bits set.
	same := fullWant()
	slices.Reverse(same.Tunnel)
	slices.Reverse(same.Via)
	same.Tunnel[0] = pfx("fd00:2::99/48")
	same.Via[0].Prefix = pfx("fd00:100:2::5/64")
	for i, w := range []Want{w, w, same} {
		if err := s.Apply(w); err != nil {
			t.Fatalf("Apply #%d: %v", i+2, err)
		}
	}
	if ch := watch.changes(t, e); len(ch) > 0 {
		t.Errorf("re-applying the same Want changed routes in the kernel:\n%s", strings.Join(ch, "\n"))
	}
	if got := kernelRoutes(t, true); !slices.Equal(got, routes) {
		t.Errorf("routes changed on re-Apply\n before: %q\n after:  %q", routes, got)
	}
	after := linkByName(t, tunName).Attrs()
	if after.Index != link.Index || after.MTU != link.MTU || after.Flags != link.Flags {
		t.Errorf("TUN changed on re-Apply: index %d→%d, MTU %d→%d, flags %v→%v",
			link.Index, after.Index, link.MTU, after.MTU, link.Flags, after.Flags)
	}
	tunnel2, via2 := s.Routes()
	if !slices.Equal(tunnel, tunnel2) || !slices.Equal(via, via2) {
		t.Errorf("Routes() changed on re-Apply: %v %v → %v %v", tunnel, via, tunnel2, via2)
	}
}

func TestApplyRemovesDroppedRoutes(t *testing.T) {
	tests := []struct {
		name string
		next func(Want) Want
	}{{
		name: "drop an IPv4 tunnel prefix",
		next: func(w Want) Want {
			w.Tunnel = slices.DeleteFunc(w.Tunnel, func(p netip.Prefix) bool { return p == pfx("10.1.0.0/16") })
			return w
		},
	}, {
		name: "drop IPv6 tunnel prefixes",
		next: func(w Want) Want { w.Tunnel = w.Tunnel[:2]; return w },
	}, {
		name: "drop via routes of both families",
		next: func(w Want) Want { w.Via = []ViaRoute{w.Via[1], w.Via[3]}; return w },
	}, {
		name: "change next hops",
		next: func(w Want) Want {
			w.Via = slices.Clone(w.Via)
			w.Via[0].Via = addr("192.0.2.13")
			w.Via[2].Via = addr("2001:db8:ff::13")
			return w
		},
	}, {
		name: "move prefixes from tunnel to via",
		next: func(w Want) Want {
			w.Tunnel = []netip.Prefix{pfx("10.2.0.0/16"), pfx("fd00:2::/48")}
			w.Via = append(slices.Clone(w.Via),
				ViaRoute{pfx("10.1.0.0/16"), addr("192.0.2.14")},
				ViaRoute{pfx("fd00:1::/48"), addr("2001:db8:ff::14")})
			return w
		},
	}, {
		name: "move prefixes from via to tunnel",
		next: func(w Want) Want {
			w.Tunnel = append(slices.Clone(w.Tunnel), pfx("10.100.1.0/24"), pfx("fd00:100:1::/64"))
			w.Via = []ViaRoute{w.Via[1], w.Via[3]}
			return w
		},
	}, {
		name: "drop everything",
		next: func(w Want) Want { return Want{Link: w.Link} },
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			e := newEnv(t)
			s := newSetup(t)
			baseline := kernelRoutes(t, false)
			first := fullWant()
			if err := s.Apply(first); err != nil {
				t.Fatalf("first Apply: %v", err)
			}
			hand := handRoutes(t, e, true)
			checkRoutes(t, "after first Apply and hand routes", union(baseline, hand, routesOf(first)))

			next := tc.next(fullWant())
			if err := s.Apply(next); err != nil {
				t.Fatalf("second Apply: %v", err)
			}
			checkRoutes(t, "after second Apply", union(baseline, hand, routesOf(next)))

			// What the second Apply added is recorded too.
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			checkRoutes(t, "after Close", union(baseline, hand))
		})
	}
}

func TestCloseRemovesOnlyOwnRoutes(t *testing.T) {
	tests := []struct {
		name string
		// prepare runs on a fresh Setup; it returns the routes Close must
		// leave, beyond the namespace's baseline.
		prepare func(t *testing.T, e env, s *Setup) []string
	}{{
		name: "never applied",
		prepare: func(t *testing.T, e env, s *Setup) []string {
			if err := netlink.LinkSetUp(e.tun); err != nil {
				t.Fatal(err)
			}
			return handRoutes(t, e, true)
		},
	}, {
		name: "after Apply",
		prepare: func(t *testing.T, e env, s *Setup) []string {
			if err := s.Apply(fullWant()); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			return handRoutes(t, e, true)
		},
	}, {
		name: "after two Applies",
		prepare: func(t *testing.T, e env, s *Setup) []string {
			w := fullWant()
			if err := s.Apply(w); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			w.Tunnel = append(w.Tunnel[1:], pfx("10.3.0.0/16"), pfx("fd00:3::/48"))
			w.Via = append(w.Via[1:], ViaRoute{pfx("10.100.3.0/24"), addr("192.0.2.13")})
			if err := s.Apply(w); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			return handRoutes(t, e, true)
		},
	}, {
		name: "after a partly failed Apply",
		prepare: func(t *testing.T, e env, s *Setup) []string {
			w := fullWant()
			w.Via = append(w.Via, ViaRoute{pfx("10.100.9.0/24"), addr("203.0.113.1")})
			if err := s.Apply(w); err == nil {
				t.Fatalf("Apply with an unreachable next hop succeeded")
			}
			return handRoutes(t, e, true)
		},
	}, {
		name: "TUN deleted before Close",
		prepare: func(t *testing.T, e env, s *Setup) []string {
			if err := s.Apply(fullWant()); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			hand := handRoutes(t, e, false)
			if err := netlink.LinkDel(e.tun); err != nil {
				t.Fatalf("delete TUN: %v", err)
			}
			return hand
		},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			e := newEnv(t)
			s := newSetup(t)
			baseline := kernelRoutes(t, false)
			keep := tc.prepare(t, e, s)
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			checkRoutes(t, "after Close", union(baseline, keep))
			if tunnel, via := s.Routes(); len(tunnel)+len(via) != 0 {
				t.Errorf("Routes() after Close = %v %v, want none", tunnel, via)
			}
		})
	}
}

func TestApplyInvalidWant(t *testing.T) {
	tests := []struct {
		name string
		bad  func(Want) Want
		// errIs, if set, must be in the error chain.
		errIs error
	}{{
		name: "link does not exist",
		bad:  func(w Want) Want { w.Link = "nope0"; return w },
	}, {
		name: "link does not exist, fewer routes",
		bad:  func(w Want) Want { return Want{Link: "nope0"} },
	}, {
		name: "empty link name",
		bad:  func(w Want) Want { w.Link = ""; return w },
	}, {
		name: "invalid tunnel prefix",
		bad:  func(w Want) Want { w.Tunnel = append(slices.Clone(w.Tunnel), netip.Prefix{}); return w },
	}, {
		name: "next hop not on a connected network",
		bad: func(w Want) Want {
			w.Via = append(slices.Clone(w.Via), ViaRoute{pfx("10.100.9.0/24"), addr("203.0.113.1")})
			return w
		},
		errIs: syscall.ENETUNREACH,
	}, {
		name: "next hop of the other family",
		bad: func(w Want) Want {
			w.Via = append(slices.Clone(w.Via), ViaRoute{pfx("10.100.9.0/24"), addr("2001:db8:ff::2")})
			return w
		},
	}, {
		name: "next hop missing",
		bad: func(w Want) Want {
			w.Via = append(slices.Clone(w.Via), ViaRoute{Prefix: pfx("10.100.9.0/24")})
			return w
		},
	}, {
		name:  "MTU out of range",
		bad:   func(w Want) Want { w.MTU = 1 << 20; return w },
		errIs: syscall.EINVAL,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			newEnv(t)
			s := newSetup(t)
			baseline := kernelRoutes(t, false)
			good := fullWant()
			if err := s.Apply(good); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			before := kernelRoutes(t, true)
			mtu := linkByName(t, tunName).Attrs().MTU

			err := s.Apply(tc.bad(fullWant()))
			if err == nil {
				t.Fatalf("Apply of an invalid Want succeeded")
			}
			t.Logf("Apply: %v", err)
			if tc.errIs != nil && !errors.Is(err, tc.errIs) {
				t.Errorf("Apply error %v is not %v", err, tc.errIs)
			}
			if got := kernelRoutes(t, true); !slices.Equal(got, before) {
				t.Errorf("invalid Want changed the routes\n before: %q\n after:  %q", before, got)
			}
			if got := linkByName(t, tunName).Attrs().MTU; got != mtu {
				t.Errorf("invalid Want changed the TUN MTU from %d to %d", mtu, got)
			}
			// The Setup still knows what it added.
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			checkRoutes(t, "after Close", baseline)
		})
	}
}

func TestPathMTU(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(t *testing.T, e env)
		dst     netip.Addr
		want    int // 0: an error is expected
	}{{
		name: "on-link IPv4",
		dst:  addr("192.0.2.2"),
		want: lanMTU,
	}, {
		name: "on-link IPv6",
		dst:  addr("2001:db8:ff::2"),
		want: lanMTU,
	}, {
		name: "IPv4-mapped IPv6 address",
		dst:  addr("::ffff:192.0.2.2"),
		want: lanMTU,
	}, {
		name: "through a gateway",
		prepare: func(t *testing.T, e env) {
			if err := netlink.RouteAdd(&netlink.Route{Dst: nlNet("10.60.0.0/16"), Gw: net.ParseIP("192.0.2.2")}); err != nil {
				t.Fatal(err)
			}
		},
		dst:  addr("10.60.1.1"),
		want: lanMTU,
	}, {
		name: "default route",
		prepare: func(t *testing.T, e env) {
			if err := netlink.RouteAdd(&netlink.Route{Gw: net.ParseIP("192.0.2.2")}); err != nil {
				t.Fatal(err)
			}
		},
		dst:  addr("8.8.8.8"),
		want: lanMTU,
	}, {
		name: "IPv4 route with its own MTU",
		prepare: func(t *testing.T, e env) {
			if err := netlink.RouteAdd(&netlink.Route{Dst: nlNet("10.70.0.0/16"), Gw: net.ParseIP("192.0.2.2"), MTU: 1300}); err != nil {
				t.Fatal(err)
			}
		},
		dst:  addr("10.70.1.1"),
		want: 1300,
	}, {
		name: "IPv6 route with its own MTU",
		prepare: func(t *testing.T, e env) {
			if err := netlink.RouteAdd(&netlink.Route{Dst: nlNet("fd00:70::/48"), Gw: net.ParseIP("2001:db8:ff::2"), MTU: 1280}); err != nil {
				t.Fatal(err)
			}
		},
		dst:  addr("fd00:70::1"),
		want: 1280,
	}, {
		name: "into the TUN after Apply",
		prepare: func(t *testing.T, e env) {
			s := newSetup(t)
			if err := s.Apply(Want{Link: tunName, MTU: 1380, Tunnel: []netip.Prefix{pfx("10.1.0.0/16"), pfx("fd00:1::/48")}}); err != nil {
				t.Fatalf("Apply: %v", err)
			}
		},
		dst:  addr("fd00:1::7"),
		want: 1380,
	}, {
		name: "loopback",
		dst:  addr("127.0.0.1"),
		want: 65536,
	}, {
		name: "no route",
		dst:  addr("198.51.100.7"),
	}, {
		name: "no IPv6 route",
		dst:  addr("fd00:99::1"),
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			enterNetns(t)
			e := newEnv(t)
			if tc.prepare != nil {
				tc.prepare(t, e)
			}
			got, err := PathMTU(tc.dst)
			if tc.want == 0 {
				if err == nil {
					t.Fatalf("PathMTU(%s) = %d, want an error", tc.dst, got)
				}
				return
			}
			if err != nil {
				t.Fatalf("PathMTU(%s): %v", tc.dst, err)
			}
			if got != tc.want {
				t.Errorf("PathMTU(%s) = %d, want %d", tc.dst, got, tc.want)
			}
		})
	}
}

// TestApplyRestoresRoutesTheKernelDropped: taking a link down makes the
// kernel delete every route through it. Apply "adds what is missing", so
// the next Apply must put them back.
func TestApplyRestoresRoutesTheKernelDropped(t *testing.T) {
	enterNetns(t)
	e := newEnv(t)
	s := newSetup(t)
	baseline := kernelRoutes(t, false)
	w := fullWant()
	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if err := netlink.LinkSetDown(e.tun); err != nil {
		t.Fatalf("TUN down: %v", err)
	}
	var tunOnly Want
	tunOnly.Via = w.Via
	checkRoutes(t, "precondition: TUN down", union(baseline, routesOf(tunOnly)))

	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if linkByName(t, tunName).Attrs().Flags&net.FlagUp == 0 {
		t.Errorf("TUN not brought back up")
	}
	checkRoutes(t, "after re-Apply", union(baseline, routesOf(w)))
}

// TestConcurrentUse runs Apply and Routes from many goroutines; -race checks
// the locking. The goroutines are on other threads, outside the test's
// namespace: the Setup's netlink sockets were opened inside it, and its
// sysctl writes go to a scratch directory, so nothing reaches the host.
func TestConcurrentUse(t *testing.T) {
	enterNetns(t)
	newEnv(t)
	s := newSetup(t)
	s.sysctlPath = t.TempDir()
	baseline := kernelRoutes(t, false)
	full := fullWant()
	small := fullWant()
	small.Tunnel = small.Tunnel[:1]
	small.Via = small.Via[2:]
	// Bring the TUN up here, so the goroutines do not touch addr_gen_mode.
	if err := s.Apply(small); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16*20)
	for g := range 16 {
		wg.Go(func() {
			for i := range 20 {
				w := full
				if (g+i)%2 == 0 {
					w = small
				}
				if err := s.Apply(w); err != nil {
					errs <- err
				}
				s.Routes()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent Apply: %v", err)
	}
	if err := s.Apply(full); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	checkRoutes(t, "after concurrent Applies", union(baseline, routesOf(full)))
	tunnel, via := s.Routes()
	if len(tunnel) != len(full.Tunnel) || len(via) != len(full.Via) {
		t.Errorf("Routes() = %v %v, want %d tunnel and %d via routes", tunnel, via, len(full.Tunnel), len(full.Via))
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkRoutes(t, "after Close", baseline)
}

// TestFailedChangeKeepsOldRoute: when a prefix moves to a next hop the
// kernel refuses (unreachable), its old route stays. Removing it first
// would send the prefix's traffic to the default route, unencrypted.
func TestFailedChangeKeepsOldRoute(t *testing.T) {
	enterNetns(t)
	newEnv(t)
	s := newSetup(t)
	baseline := kernelRoutes(t, false)
	w := fullWant()
	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	unreachable := addr("198.18.0.1")
	for _, tc := range []struct {
		name   string
		change func(w *Want)
	}{
		{"tunnel prefix moves to an unreachable next hop", func(w *Want) {
			w.Via = append(w.Via, ViaRoute{Prefix: w.Tunnel[0], Via: unreachable})
			w.Tunnel = w.Tunnel[1:]
		}},
		{"via route moves to an unreachable next hop", func(w *Want) {
			for i := range w.Via {
				if w.Via[i].Via.Is4() {
					w.Via[i].Via = unreachable
					break
				}
			}
		}},
	} {
		// No t.Run: a subtest runs on another thread, outside the
		// namespace this test's thread entered.
		next := fullWant()
		tc.change(&next)
		if err := s.Apply(next); err == nil {
			t.Fatalf("%s: Apply succeeded", tc.name)
		}
		checkRoutes(t, tc.name, union(baseline, routesOf(w)))
		// The old routes are still ours: Close removes them.
		if err := s.Apply(w); err != nil {
			t.Fatalf("%s: Apply back: %v", tc.name, err)
		}
		checkRoutes(t, tc.name+", then back", union(baseline, routesOf(w)))
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	checkRoutes(t, "after Close", baseline)
}

// TestForeignRouteReplacedWithWarning: a wanted prefix that already has a
// route Setup did not install is replaced, and the log says so, once.
func TestForeignRouteReplacedWithWarning(t *testing.T) {
	enterNetns(t)
	e := newEnv(t)
	var logs strings.Builder
	s, err := New(slog.New(slog.NewTextHandler(&logs, nil)))
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	foreign := &netlink.Route{Dst: nlNet("10.1.0.0/16"), Gw: net.ParseIP("192.0.2.99"), LinkIndex: e.lan.Attrs().Index}
	if err := netlink.RouteAdd(foreign); err != nil {
		t.Fatalf("adding the operator's route: %v", err)
	}
	w := fullWant()
	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	const msg = "replacing a route bridgehead did not install"
	if n := strings.Count(logs.String(), msg); n != 1 || !strings.Contains(logs.String(), "prefix=10.1.0.0/16") {
		t.Errorf("log has %d warnings about replacing (want 1, for 10.1.0.0/16):\n%s", n, logs.String())
	}
	if err := s.Apply(w); err != nil {
		t.Fatalf("Apply again: %v", err)
	}
	if n := strings.Count(logs.String(), msg); n != 1 {
		t.Errorf("second Apply warned again (%d warnings)", n)
	}
}

// TestApplyAfterClose: a closed Setup refuses to Apply (its netlink handle
// is gone; a call would act on whatever namespace the caller is in) and
// changes nothing.
func TestApplyAfterClose(t *testing.T) {
	enterNetns(t)
	newEnv(t)
	s := newSetup(t)
	baseline := kernelRoutes(t, false)
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := s.Apply(fullWant()); err == nil {
		t.Fatal("Apply after Close succeeded")
	}
	checkRoutes(t, "after Apply on a closed Setup", baseline)
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}
