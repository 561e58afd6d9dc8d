package daemon

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/udp"
)

// TestLANWatch: a broken LAN side makes /readyz answer 503 with the
// problem, tells the router (which tells remote gateways), and is logged
// once per change, not once per check.
func TestLANWatch(t *testing.T) {
	dir := t.TempDir()
	k := newLabKeys(t, dir)
	path := k.write(t, dir, "a", k.siteYAML("a", "10.1.0.0/24", "10.11.0.0/16", epA.String()), k.siteYAML("b", "10.2.0.0/24", "10.12.0.0/16", epB.String()))
	bindA, _ := udp.NewPair(epA, epB)
	g, _, _ := startGateway(t, path, bindA)
	var logs bytes.Buffer
	problem := ""
	g.lan = lanWatch{
		log:     slog.New(slog.NewTextHandler(&logs, nil)),
		cfg:     g.cfg.Load,
		probe:   func(*config.Config, lanSide) string { return problem },
		deliver: g.r.SetCanDeliver,
	}
	mux := http.NewServeMux()
	g.healthHandlers(mux)
	readyz := func() (int, health.Report) {
		rec := httptest.NewRecorder()
		mux.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
		var rep health.Report
		if err := json.Unmarshal(rec.Body.Bytes(), &rep); err != nil {
			t.Fatal(err)
		}
		return rec.Code, rep
	}

	g.lan.check()
	if code, rep := readyz(); rep.LAN != "" || !g.r.CanDeliver() {
		t.Fatalf("healthy LAN: /readyz %d %+v, router can deliver %v", code, rep, g.r.CanDeliver())
	}
	problem = "LAN interface lan is down"
	for range 5 {
		g.lan.check()
	}
	code, rep := readyz()
	if code != http.StatusServiceUnavailable || rep.Ready || rep.LAN != problem || g.r.CanDeliver() {
		t.Fatalf("broken LAN: /readyz %d %+v, router can deliver %v", code, rep, g.r.CanDeliver())
	}
	if st := g.status(); st.LAN != problem || st.Ready {
		t.Errorf("status with a broken LAN: ready %v, lan %q", st.Ready, st.LAN)
	}
	problem = ""
	for range 5 {
		g.lan.check()
	}
	if _, rep := readyz(); rep.LAN != "" || !g.r.CanDeliver() {
		t.Fatalf("LAN back: %+v, router can deliver %v", rep, g.r.CanDeliver())
	}
	if n := strings.Count(logs.String(), "\n"); n != 2 {
		t.Errorf("%d log lines for one failure and its repair, want 2:\n%s", n, logs.String())
	}
}

// TestNetlinkLANProbe: in a namespace of its own, the probe finds the LAN
// interface down, without a carrier (its veth peer down), and a nodeCIDR
// without a route through it, and nothing wrong once all is well.
func TestNetlinkLANProbe(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a network namespace; skipped with -short")
	}
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("needs root; CI runs as root")
		}
		t.Skip("needs root to create a network namespace")
	}
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
		t.Fatal(err)
	}
	defer func() {
		err := netns.Set(orig)
		ns.Close()
		orig.Close()
		if err != nil {
			t.Errorf("restore netns: %v", err) // stay locked: the thread dies with the goroutine
			return
		}
		runtime.UnlockOSThread()
	}()

	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "lan"}, PeerName: "lanpeer"}
	if err := netlink.LinkAdd(veth); err != nil {
		t.Fatal(err)
	}
	lan, _ := netlink.LinkByName("lan")
	peer, _ := netlink.LinkByName("lanpeer")
	for _, a := range []string{"192.168.77.2/24", "fd00:77::2/64"} {
		addr, _ := netlink.ParseAddr(a)
		addr.Flags = unix.IFA_F_NODAD
		if err := netlink.AddrAdd(lan, addr); err != nil {
			t.Fatal(err)
		}
	}
	// Forwarding makes the kernel route the subnet-router anycast
	// address fd00:77:: to lo, as on a gateway.
	if err := os.WriteFile("/proc/sys/net/ipv6/conf/all/forwarding", []byte("1"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := &config.Config{Site: "b", LAN: &config.LAN{Interface: "lan"}, Sites: []config.Site{{
		Name: "b", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.77.0/24"), netip.MustParsePrefix("fd00:77::/64"), netip.MustParsePrefix("192.168.78.0/24")},
	}}}
	check := func(step, want string) {
		t.Helper()
		deadline := time.Now().Add(2 * time.Second) // carrier changes settle asynchronously
		links := lanLinks{h: &netlink.Handle{}}
		probe := func() string { return links.probe(cfg, links.side(cfg)) }
		got := probe()
		for !strings.Contains(got, want) || (want == "" && got != "") {
			if time.Now().After(deadline) {
				t.Fatalf("%s: probe says %q, want %q", step, got, want)
			}
			time.Sleep(10 * time.Millisecond)
			got = probe()
		}
		t.Logf("%s: %q", step, got)
	}
	check("link down", "LAN interface lan is down")
	netlink.LinkSetUp(lan)
	check("peer down", "LAN interface lan has no carrier")
	netlink.LinkSetUp(peer)
	check("no route to the second nodeCIDR", "no route to nodeCIDR 192.168.78.0/24 through the LAN interface lan")
	if err := netlink.RouteAdd(&netlink.Route{LinkIndex: lan.Attrs().Index, Dst: mustIPNet("192.168.78.0/24"), Gw: []byte{192, 168, 77, 1}}); err != nil {
		t.Fatal(err)
	}
	check("all well", "")
	cfg.LAN.Interface = "nosuch"
	check("no such interface", "LAN interface nosuch: ")
	cfg.LAN = nil
	check("no lan section", "")
}

func mustIPNet(s string) *net.IPNet {
	_, n, err := net.ParseCIDR(s)
	if err != nil {
		panic(err)
	}
	return n
}
