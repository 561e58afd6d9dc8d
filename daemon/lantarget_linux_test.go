package daemon

import (
	"io"
	"log/slog"
	"net/netip"
	"os/exec"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/vishvananda/netns"

	"github.com/bridgehead/bridgehead/config"
)

// TestLANTargets: a gateway namespace and a "node" namespace joined by a
// veth. While the node answers pings, the targets report nothing; when
// the node's firewall drops echo requests (the LAN is up and routed but
// passes nothing), the problem appears within the target timeout, per
// family; when the rule goes, it clears. Each figure is logged.
func TestLANTargets(t *testing.T) {
	needsNetns(t)
	const gwNS, nodeNS = "bhc-lt-gw", "bhc-lt-node"
	ip := func(args ...string) {
		t.Helper()
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	nft := func(script string) {
		t.Helper()
		cmd := exec.Command("ip", "netns", "exec", nodeNS, "nft", "-f", "-")
		cmd.Stdin = strings.NewReader(script)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("nft: %v: %s", err, out)
		}
	}
	for _, ns := range []string{gwNS, nodeNS} {
		exec.Command("ip", "netns", "del", ns).Run() // a previous run's leftovers
		ip("netns", "add", ns)
		t.Cleanup(func() { exec.Command("ip", "netns", "del", ns).Run() })
	}
	ip("-n", gwNS, "link", "add", "lan", "type", "veth", "peer", "name", "eth0", "netns", nodeNS)
	ip("-n", gwNS, "addr", "add", "192.168.88.2/24", "dev", "lan")
	ip("-n", gwNS, "addr", "add", "fd00:88::2/64", "dev", "lan", "nodad")
	ip("-n", nodeNS, "addr", "add", "192.168.88.1/24", "dev", "eth0")
	ip("-n", nodeNS, "addr", "add", "fd00:88::1/64", "dev", "eth0", "nodad")
	for _, ns := range []string{gwNS, nodeNS} {
		ip("-n", ns, "link", "set", "lo", "up")
	}
	ip("-n", gwNS, "link", "set", "lan", "up")
	ip("-n", nodeNS, "link", "set", "eth0", "up")

	// Sockets open in the namespace of the thread that calls tick.
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		t.Fatal(err)
	}
	target, err := netns.GetFromName(gwNS)
	if err != nil {
		t.Fatal(err)
	}
	defer target.Close()
	if err := netns.Set(target); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := netns.Set(orig); err != nil {
			t.Errorf("restore netns: %v", err) // stay locked: the thread dies with the goroutine
			return
		}
		orig.Close()
		runtime.UnlockOSThread()
	}()

	start := time.Now()
	lt := newLANTargets(slog.New(slog.NewTextHandler(io.Discard, nil)), func() time.Duration { return time.Since(start) })
	defer lt.Close()
	cfg := &config.Config{LAN: &config.LAN{Interface: "lan",
		Targets: []netip.Addr{netip.MustParseAddr("192.168.88.1"), netip.MustParseAddr("fd00:88::1")}}}

	// await ticks every LANCheckInterval, as the watch does, until the
	// problem matches want (a substring; "" for none), and returns how
	// long that took.
	await := func(step, want string) time.Duration {
		t.Helper()
		t0 := time.Now()
		for {
			got := lt.tick(cfg)
			if (want == "" && got == "") || (want != "" && strings.Contains(got, want)) {
				t.Logf("%s: %q after %v", step, got, time.Since(t0).Round(time.Millisecond))
				return time.Since(t0)
			}
			if time.Since(t0) > 5*time.Second {
				t.Fatalf("%s: still %q after 5 s, want %q", step, got, want)
			}
			time.Sleep(LANCheckInterval)
		}
	}
	// stays asserts that ticking for d reports nothing.
	stays := func(step string, d time.Duration) {
		t.Helper()
		for t0 := time.Now(); time.Since(t0) < d; time.Sleep(LANCheckInterval) {
			if got := lt.tick(cfg); got != "" {
				t.Fatalf("%s: %q", step, got)
			}
		}
	}

	stays("both targets answer", 2*time.Second)
	dropV4 := "table inet bhc {\n chain in {\n  type filter hook input priority 0;\n  icmp type echo-request drop\n }\n}\n"
	nft(dropV4)
	stays("the IPv6 target still answers", 2*time.Second)
	nft("add rule inet bhc in icmpv6 type echo-request drop")
	d := await("no target answers", "no LAN target answered ICMP echo through lan within 500ms (192.168.88.1, fd00:88::1)")
	if d > 2*time.Second {
		t.Errorf("silence reported after %v, want about the 500 ms timeout", d)
	}
	nft("delete table inet bhc")
	await("answers again", "")

	// A new target list starts a grace period: the silent target is
	// reported one timeout later, not at once.
	nft(dropV4)
	cfg.LAN.Targets = []netip.Addr{netip.MustParseAddr("192.168.88.1")}
	if got := lt.tick(cfg); got != "" {
		t.Fatalf("first tick of a new target list: %q", got)
	}
	await("IPv4 only, dropped", "(192.168.88.1)")
	nft("delete table inet bhc")
	await("IPv4 answers again", "")

	// A reply must come through the LAN interface: bound to another
	// interface (lo), the pings cannot reach the target.
	cfg.LAN.Interface = "lo"
	await("bound to lo", "no LAN target answered ICMP echo through lo")

	// No targets: nothing to report and the sockets are closed.
	cfg.LAN.Targets = nil
	if got := lt.tick(cfg); got != "" || lt.conns[0] != nil || lt.conns[1] != nil {
		t.Fatalf("no targets: %q, sockets %v", got, lt.conns)
	}
}
