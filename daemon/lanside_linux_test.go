package daemon

import (
	"bytes"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/config"
)

// lanNS makes a network namespace of its own, named name, in which the
// gateway's LAN is the veth lan0 (peer lan0peer, both up) holding
// 10.2.0.4/24 and fd00:2::4/64, and lo holds 10.9.9.9/32; it returns a
// netlink handle in it. The namespace and handle go when the test ends.
func lanNS(t *testing.T, name string) *netlink.Handle {
	t.Helper()
	needsNetns(t)
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	exec.Command("ip", "netns", "del", name).Run() // a previous run's leftovers
	ip("netns", "add", name)
	t.Cleanup(func() { exec.Command("ip", "netns", "del", name).Run() })
	ip("-n", name, "link", "add", "lan0", "type", "veth", "peer", "name", "lan0peer")
	ip("-n", name, "addr", "add", "10.2.0.4/24", "dev", "lan0")
	ip("-n", name, "addr", "add", "fd00:2::4/64", "dev", "lan0", "nodad")
	ip("-n", name, "addr", "add", "10.9.9.9/32", "dev", "lo")
	for _, l := range []string{"lo", "lan0", "lan0peer"} {
		ip("-n", name, "link", "set", l, "up")
	}
	nsh, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer nsh.Close()
	h, err := netlink.NewHandleAt(nsh)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.Close)
	return h
}

// lanConfig is a one-site config of gateway gw at address (IPv4 or
// IPv6) with lan as its lan section.
func lanConfig(address string, lan *config.LAN) *config.Config {
	return &config.Config{Site: "b", Gateway: "gw", Interface: config.Interface{Name: "bh0"}, LAN: lan, Sites: []config.Site{{
		Name: "b", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/24")},
		Gateways: []config.Gateway{{Name: "gw", Address: netip.MustParseAddr(address)}},
	}}}
}

// TestLANSide: without a lan section the LAN watch watches the interface
// that holds the gateway's own address; lan.interface overrides it; with
// the address on no interface nothing is watched, with a warning.
func TestLANSide(t *testing.T) {
	links := lanLinks{h: lanNS(t, "bhc-lanside")}
	for _, tc := range []struct {
		name string
		cfg  *config.Config
		want lanSide
		warn string // in Warning when want watches nothing
	}{
		{"address on the LAN interface", lanConfig("10.2.0.4", nil),
			lanSide{Interface: "lan0", Derived: true, Addr: netip.MustParseAddr("10.2.0.4")}, ""},
		{"IPv6 address on the LAN interface", lanConfig("fd00:2::4", nil),
			lanSide{Interface: "lan0", Derived: true, Addr: netip.MustParseAddr("fd00:2::4")}, ""},
		{"address on lo", lanConfig("10.9.9.9", nil),
			lanSide{Interface: "lo", Derived: true, Addr: netip.MustParseAddr("10.9.9.9")}, ""},
		{"address on no interface", lanConfig("10.2.0.5", nil),
			lanSide{}, "no interface holds this gateway's address 10.2.0.5"},
		{"override given", lanConfig("10.2.0.4", &config.LAN{Interface: "eth7"}),
			lanSide{Interface: "eth7"}, ""},
		{"gateway not in the catalog", func() *config.Config { c := lanConfig("10.2.0.4", nil); c.Gateway = "other"; return c }(),
			lanSide{}, `gateway "other" is not in the catalog`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := links.side(tc.cfg)
			warning := got.Warning
			got.Warning = ""
			if got != tc.want {
				t.Errorf("side %+v, want %+v", got, tc.want)
			}
			switch {
			case tc.warn == "" && warning != "":
				t.Errorf("warning %q, want none", warning)
			case !strings.Contains(warning, tc.warn):
				t.Errorf("warning %q, want one with %q", warning, tc.warn)
			}
		})
	}
}

// TestLANWatchDerived: a gateway whose config has no lan section stops
// delivering as soon as the link holding its address goes down (remote
// gateways then move its flows within a round trip, not after ~9 s of
// missed probes); the watched interface is logged once, and again when a
// reload changes it.
func TestLANWatchDerived(t *testing.T) {
	name := "bhc-lanwatch"
	links := lanLinks{h: lanNS(t, name)}
	var cfg atomic.Pointer[config.Config]
	cfg.Store(lanConfig("10.2.0.4", nil))
	var logs bytes.Buffer
	deliver := true
	w := lanWatch{log: slog.New(slog.NewTextHandler(&logs, nil)), cfg: cfg.Load,
		probe: links.probe, resolve: links.side, deliver: func(ok bool) { deliver = ok }}

	w.check()
	if p := w.Problem(); p != "" || !deliver {
		t.Fatalf("LAN up: problem %q, deliver %v", p, deliver)
	}
	if out, err := exec.Command("ip", "-n", name, "link", "set", "lan0", "down").CombinedOutput(); err != nil {
		t.Fatalf("link down: %v: %s", err, out)
	}
	w.check()
	if p := w.Problem(); p != "LAN interface lan0 is down" || deliver {
		t.Fatalf("LAN down: problem %q, deliver %v", p, deliver)
	}
	// A reload to an address no interface holds: a warning, and the
	// gateway delivers as before the change.
	cfg.Store(lanConfig("10.2.0.5", nil))
	w.check()
	w.check()
	if p := w.Problem(); p != "" || !deliver {
		t.Fatalf("nothing watched: problem %q, deliver %v", p, deliver)
	}
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	want := []string{
		`level=INFO msg="watching the LAN interface that holds this gateway's address; lan.interface overrides it" interface=lan0 address=10.2.0.4 source=derived`,
		`level=WARN msg="cannot deliver to this site`,
		`level=WARN msg="LAN side not watched`,
		`level=INFO msg="can deliver to this site again"`,
	}
	if len(lines) != len(want) {
		t.Fatalf("%d log lines, want %d:\n%s", len(lines), len(want), logs.String())
	}
	for i := range want {
		if !strings.Contains(lines[i], want[i]) {
			t.Errorf("log line %d: %s\nwant %s", i, lines[i], want[i])
		}
	}
}

// TestNetlinkLANProbe: in a namespace of its own, the probe finds the LAN
// interface down, without a carrier (its veth peer down), and a nodeCIDR
// without a route through it, and nothing wrong once all is well.
func TestNetlinkLANProbe(t *testing.T) {
	enterNetns(t)

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
