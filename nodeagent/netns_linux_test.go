package nodeagent

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// requireRoot skips a test that needs root, except under CI=true, where
// a skip would hide a broken agent (CI runs as root).
func requireRoot(t *testing.T) {
	t.Helper()
	if testing.Short() {
		t.Skip("needs a network namespace; skipped with -short")
	}
	if os.Geteuid() == 0 {
		return
	}
	if os.Getenv("CI") != "" {
		t.Fatal("needs root to create a network namespace; CI runs as root")
	}
	t.Skip("needs root to create a network namespace")
}

// testNetns creates an unnamed network namespace (nothing shows in ip
// netns list; it goes away with its last handle) holding lo and a veth
// pair, lan0 with 10.224.0.11/16 and fd00:224::11/64 (the next hops of
// the tests are on it), and returns a netlink handle into it.
func testNetns(t *testing.T) (netns.NsHandle, *netlink.Handle) {
	t.Helper()
	requireRoot(t)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	ns, err := netns.New()
	if serr := netns.Set(orig); serr != nil {
		t.Fatalf("back to the original netns: %v", serr) // thread stays locked: the runtime ends it
	}
	orig.Close()
	runtime.UnlockOSThread()
	if err != nil {
		t.Fatal(err)
	}
	h, err := netlink.NewHandleAt(ns)
	if err != nil {
		ns.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close(); ns.Close() })
	if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan0"}, PeerName: "lan1"}); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"lo", "lan0", "lan1"} {
		l, err := h.LinkByName(name)
		if err != nil {
			t.Fatal(err)
		}
		if name == "lan0" {
			for _, a := range []string{"10.224.0.11/16", "fd00:224::11/64"} {
				addr, _ := netlink.ParseAddr(a)
				addr.Flags = unix.IFA_F_NODAD
				if err := h.AddrAdd(l, addr); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := h.LinkSetUp(l); err != nil {
			t.Fatal(err)
		}
	}
	return ns, h
}

func rt(dst string, vias ...string) Route {
	r := Route{Destination: netip.MustParsePrefix(dst)}
	for _, v := range vias {
		r.Vias = append(r.Vias, netip.MustParseAddr(v))
	}
	return r
}

func TestRoutesSet(t *testing.T) {
	ns, h := testNetns(t)
	r := NewRoutes(h, &ns)
	// A route of someone else, which the agent must never touch.
	foreign := &netlink.Route{Dst: &net.IPNet{IP: net.IP{198, 51, 100, 0}, Mask: net.CIDRMask(24, 32)}, Gw: net.IP{10, 224, 0, 1}, Protocol: unix.RTPROT_STATIC}
	if err := h.RouteAdd(foreign); err != nil {
		t.Fatal(err)
	}
	want := []Route{
		rt("10.244.2.0/24", "10.224.0.12"),
		rt("10.245.0.0/16", "10.224.0.2", "10.224.0.3"),
		rt("fd00:244:0:2::/64", "fd00:224::12"),
		rt("fd00:245::/56", "fd00:224::2", "fd00:224::3"),
	}
	steps := []struct {
		name string
		want []Route
		ch   RouteChange
	}{
		{"install", want, RouteChange{Added: 4}},
		{"again: nothing to do", want, RouteChange{}},
		{"model changes", []Route{
			want[0],
			rt("10.245.0.0/16", "10.224.0.2"), // a gateway left
			rt("fd00:245::/56", "fd00:224::2", "fd00:224::3"), // unchanged
			rt("192.168.50.0/24", "10.224.0.4"),               // a new site
		}, RouteChange{Added: 1, Replaced: 1, Deleted: 1}},
	}
	for _, s := range steps {
		ch, err := r.Set(s.want)
		if err != nil {
			t.Fatalf("%s: %v", s.name, err)
		}
		if ch != s.ch {
			t.Errorf("%s: %+v, want %+v", s.name, ch, s.ch)
		}
		have, err := r.List()
		if err != nil {
			t.Fatal(err)
		}
		sorted := slices.Clone(s.want)
		slices.SortFunc(sorted, func(a, b Route) int { return comparePrefix(a.Destination, b.Destination) })
		if strings.Join(routeStrings(have), "\n") != strings.Join(routeStrings(sorted), "\n") {
			t.Errorf("%s: installed\n%s\nwant\n%s", s.name, strings.Join(routeStrings(have), "\n"), strings.Join(routeStrings(sorted), "\n"))
		}
	}
	n, err := r.Flush()
	if err != nil || n != 4 {
		t.Errorf("Flush: %d %v, want 4 routes", n, err)
	}
	left, _ := h.RouteListFiltered(unix.AF_INET, &netlink.Route{Protocol: unix.RTPROT_STATIC}, netlink.RT_FILTER_PROTOCOL)
	if len(left) != 1 || left[0].Dst.String() != "198.51.100.0/24" {
		t.Errorf("foreign routes after Flush: %v", left)
	}
}

func TestRoutesSetReportsEveryFailure(t *testing.T) {
	ns, h := testNetns(t)
	r := NewRoutes(h, &ns)
	ch, err := r.Set([]Route{
		rt("10.250.0.0/16", "10.99.0.1"), // not on any link
		rt("10.251.0.0/16", "10.224.0.12"),
	})
	if err == nil || !strings.Contains(err.Error(), "route 10.250.0.0/16 via 10.99.0.1") {
		t.Errorf("error %v, want one naming the route", err)
	}
	if ch.Added != 1 {
		t.Errorf("%+v: the good route was not installed", ch)
	}
}

// TestRoutesWatch: deleting one of the agent's routes signals; a route of
// the agent appearing (its own Set) does not.
func TestRoutesWatch(t *testing.T) {
	ns, h := testNetns(t)
	r := NewRoutes(h, &ns)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 1)
	if err := r.Watch(ctx, changed, func(err error) { t.Errorf("watch: %v", err) }); err != nil {
		t.Fatal(err)
	}
	want := []Route{rt("10.244.2.0/24", "10.224.0.12"), rt("fd00:244:0:2::/64", "fd00:224::12")}
	if _, err := r.Set(want); err != nil {
		t.Fatal(err)
	}
	select {
	case <-changed:
		t.Fatal("the agent's own routes signalled a change")
	case <-time.After(200 * time.Millisecond):
	}
	for _, w := range want {
		if err := h.RouteDel(toNetlink(w)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-changed:
		case <-time.After(10 * time.Second): // a failure bound, not a measurement
			t.Fatalf("deleting %s was not signalled", w)
		}
		ch, err := r.Set(want)
		if err != nil || ch.Added != 1 {
			t.Fatalf("repair of %s: %+v %v", w, ch, err)
		}
	}
}

func TestSNAT(t *testing.T) {
	ns, _ := testNetns(t)
	s := NewSNAT(func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
	d, err := FromConfig(loadCatalog(t), "a1")
	if err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.Ensure(d); err != nil || !wrote {
		t.Fatalf("first Ensure: wrote=%v err=%v", wrote, err)
	}
	if wrote, err := s.Ensure(d); err != nil || wrote {
		t.Fatalf("second Ensure: wrote=%v err=%v (want no write)", wrote, err)
	}
	c, _ := nftables.New(nftables.WithNetNSFd(int(ns)))
	tbl := &nftables.Table{Name: SNATTable, Family: nftables.TableFamilyINet}
	ch := &nftables.Chain{Name: snatChain, Table: tbl}
	rules, err := c.GetRules(tbl, ch)
	if err != nil || len(rules) != 2 {
		t.Fatalf("rules %d %v, want 2 (IPv4 and IPv6)", len(rules), err)
	}
	cluster4, err := c.GetSetByName(tbl, "cluster4")
	if err != nil {
		t.Fatal(err)
	}
	els, _ := c.GetSetElements(cluster4)
	// 10.224/16, 10.244/16 + 10.245/16 (adjacent: merged), 10.96/16,
	// 192.168.50/24: four ranges, a start and an end each.
	if len(els) != 8 {
		t.Errorf("cluster4 has %d elements, want 8", len(els))
	}

	// Someone deletes a rule: the next Ensure puts the table back.
	if err := c.DelRule(rules[0]); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(); err != nil {
		t.Fatal(err)
	}
	if wrote, err := s.Ensure(d); err != nil || !wrote {
		t.Fatalf("Ensure after a rule was deleted: wrote=%v err=%v", wrote, err)
	}
	// A new model rewrites it.
	d2 := *d
	d2.ClusterCIDRs = append(slices.Clone(d.ClusterCIDRs), netip.MustParsePrefix("10.250.0.0/16"))
	if wrote, err := s.Ensure(&d2); err != nil || !wrote {
		t.Fatalf("Ensure of a new model: wrote=%v err=%v", wrote, err)
	}
	if rules, _ := c.GetRules(tbl, ch); len(rules) != 2 {
		t.Errorf("%d rules after rewrite, want 2 (no duplicates)", len(rules))
	}
	for range 2 {
		if err := s.Remove(); err != nil {
			t.Fatalf("Remove: %v", err)
		}
	}
	if tbls, _ := c.ListTablesOfFamily(nftables.TableFamilyINet); len(tbls) != 0 {
		t.Errorf("tables left after Remove: %v", tbls)
	}
}

// TestSNATHandEdits edits the table by hand with nft, as an operator
// would, and checks that Ensure (the periodic check's SNAT step) sees
// each edit and puts the table back. Before Ensure compared set
// elements and expressions, an edited element went unnoticed: the rules'
// fingerprints and the sets' names were all it looked at.
func TestSNATHandEdits(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("nft not found; CI installs it (make deps)")
		}
		t.Skip("nft not found")
	}
	d, err := FromConfig(loadCatalog(t), "a1")
	if err != nil {
		t.Fatal(err)
	}
	fams := snatFamilies(d)
	fp := snatFingerprint(fams)
	tests := []struct {
		name string
		edit []string // nft arguments; {fp} is the rules' comment, {handle} the IPv4 rule's
	}{
		{"delete a cluster element", []string{"delete element inet bridgehead-node cluster4 { 10.96.0.0/16 }"}},
		{"add a cluster element", []string{"add element inet bridgehead-node cluster4 { 8.8.8.0/24 }"}},
		{"add a pod element", []string{"add element inet bridgehead-node pods6 { fd00:999::/64 }"}},
		{"replace an element", []string{
			"delete element inet bridgehead-node cluster4 { 192.168.50.0/24 }",
			"add element inet bridgehead-node cluster4 { 192.168.51.0/24 }"}},
		{"rule loses its exception, keeps its comment", []string{
			`replace rule inet bridgehead-node postrouting handle {handle} meta nfproto ipv4 ip saddr @pods4 masquerade comment "{fp}"`}},
		{"a set added", []string{"add set inet bridgehead-node extra { type ipv4_addr; }"}},
		{"a chain added", []string{"add chain inet bridgehead-node extra"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, _ := testNetns(t)
			s := NewSNAT(func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
			if wrote, err := s.Ensure(d); err != nil || !wrote {
				t.Fatalf("first Ensure: wrote=%v err=%v", wrote, err)
			}
			before := nftList(t, nft, ns)
			c, _ := nftables.New(nftables.WithNetNSFd(int(ns)))
			tbl := &nftables.Table{Name: SNATTable, Family: nftables.TableFamilyINet}
			rules, err := c.GetRules(tbl, &nftables.Chain{Name: snatChain, Table: tbl})
			if err != nil || len(rules) == 0 {
				t.Fatalf("rules: %v %v", rules, err)
			}
			for _, e := range tt.edit {
				e = strings.NewReplacer("{fp}", fp, "{handle}", fmt.Sprint(rules[0].Handle)).Replace(e)
				nsenterNft(t, nft, ns, e)
			}
			if edited := nftList(t, nft, ns); edited == before {
				t.Fatalf("the edit changed nothing:\n%s", edited)
			}
			start := time.Now()
			if wrote, err := s.Ensure(d); err != nil || !wrote {
				t.Fatalf("Ensure after the edit: wrote=%v err=%v (want a rewrite)", wrote, err)
			}
			t.Logf("repaired in %v", time.Since(start))
			if after := nftList(t, nft, ns); after != before {
				t.Errorf("table after repair:\n%s\nwant:\n%s", after, before)
			}
			if wrote, err := s.Ensure(d); err != nil || wrote {
				t.Errorf("Ensure after the repair: wrote=%v err=%v (want no write)", wrote, err)
			}
		})
	}
}

// nsenterNft runs nft with args (one command line) in ns.
func nsenterNft(t *testing.T, nft string, ns netns.NsHandle, args ...string) string {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/self/fd/3", nft}, args...)...)
	// A duplicate: the File closes its descriptor, ns stays open.
	fd, err := unix.Dup(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "netns")
	defer f.Close()
	cmd.ExtraFiles = []*os.File{f}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("nft %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// nftList is the table as nft prints it, without rule handles.
func nftList(t *testing.T, nft string, ns netns.NsHandle) string {
	t.Helper()
	return nsenterNft(t, nft, ns, "list table inet "+SNATTable)
}
