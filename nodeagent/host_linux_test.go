package nodeagent

import (
	"context"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// TestHostNetBridgeNetfilter: in a namespace whose bridge-nf-call
// sysctls are 0 (a host where something turned them off; a fresh
// namespace starts with 1), the agent sets both to 1, once.
func TestHostNetBridgeNetfilter(t *testing.T) {
	ns, _ := testNetns(t)
	h := NewHostNet(&ns, func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
	if _, err := os.Stat("/proc/sys/net/bridge"); err != nil {
		t.Skip("br_netfilter is not loaded on this host; the test does not load modules")
	}
	h.loadModule = func(string) error { return errors.New("the test loads no module") }
	read := func(k string) string {
		var v []byte
		if err := h.inNetns(func() (err error) { v, err = os.ReadFile(filepath.Join(h.procSys, k)); return err }); err != nil {
			t.Fatal(err)
		}
		return strings.TrimSpace(string(v))
	}
	if err := h.inNetns(func() error {
		for _, k := range []string{sysctlBridgeNFIPv4, sysctlBridgeNFIPv6} {
			if err := os.WriteFile(filepath.Join(h.procSys, k), []byte("0"), 0o644); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	d, err := FromConfig(loadCatalog(t), "a1")
	if err != nil {
		t.Fatal(err)
	}
	changed, err := h.EnsureBridgeNetfilter(d)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"net.bridge.bridge-nf-call-iptables=1", "net.bridge.bridge-nf-call-ip6tables=1"}
	if !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	for _, k := range []string{sysctlBridgeNFIPv4, sysctlBridgeNFIPv6} {
		if v := read(k); v != "1" {
			t.Errorf("%s = %s after Ensure, want 1", k, v)
		}
	}
	if changed, err := h.EnsureBridgeNetfilter(d); err != nil || len(changed) != 0 {
		t.Errorf("second Ensure: %v %v, want nothing to do", changed, err)
	}
	if v := readHost(t, sysctlBridgeNFIPv4); v != "1" {
		t.Logf("note: the host's own %s is %s (the test only touched its namespace)", sysctlBridgeNFIPv4, v)
	}

	// An IPv4-only node leaves the IPv6 sysctl alone.
	if err := h.inNetns(func() error {
		return os.WriteFile(filepath.Join(h.procSys, sysctlBridgeNFIPv6), []byte("0"), 0o644)
	}); err != nil {
		t.Fatal(err)
	}
	v4only := &Desired{Node: d.Node, Site: d.Site, PodCIDR: d.PodCIDR}
	if changed, err := h.EnsureBridgeNetfilter(v4only); err != nil || len(changed) != 0 || read(sysctlBridgeNFIPv6) != "0" {
		t.Errorf("IPv4-only node: %v %v, ip6tables sysctl %s (want untouched 0)", changed, err, read(sysctlBridgeNFIPv6))
	}
}

func readHost(t *testing.T, k string) string {
	v, err := os.ReadFile(filepath.Join("/proc/sys", k))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(v))
}

// TestHostNetNoBridgeNetfilter: without br_netfilter, and no way to load
// it, the failure says what breaks and what to do.
func TestHostNetNoBridgeNetfilter(t *testing.T) {
	h := NewHostNet(nil, nil)
	h.procSys = t.TempDir() // a host without /proc/sys/net/bridge
	var asked []string
	h.loadModule = func(name string) error {
		asked = append(asked, name)
		return errors.New(`modprobe: FATAL: Module br_netfilter not found in directory /lib/modules/6.1.0`)
	}
	d := &Desired{Node: "a1", PodCIDR: netip.MustParsePrefix("10.244.1.0/24")}
	_, err := h.EnsureBridgeNetfilter(d)
	if err == nil || !strings.Contains(err.Error(), "br_netfilter is not loaded") || !strings.Contains(err.Error(), "modprobe br_netfilter") {
		t.Errorf("error %v, want one saying br_netfilter is missing and how to load it", err)
	}
	if !slices.Equal(asked, []string{"br_netfilter"}) {
		t.Errorf("modules asked for: %v", asked)
	}
	// The module loads: the sysctls appear and are set.
	h.loadModule = func(string) error {
		if err := os.MkdirAll(filepath.Join(h.procSys, "net/bridge"), 0o755); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(h.procSys, sysctlBridgeNFIPv4), []byte("0\n"), 0o644)
	}
	if changed, err := h.EnsureBridgeNetfilter(d); err != nil || !slices.Equal(changed, []string{"net.bridge.bridge-nf-call-iptables=1"}) {
		t.Errorf("after loading: %v %v", changed, err)
	}
}

// TestHostNetForward builds the firewalls that drop forwarded pod traffic
// (a FORWARD chain with policy drop, as Docker and many host firewalls
// leave it) and the fixes the error message proposes, and checks what
// CheckForward says of each.
func TestHostNetForward(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("nft not found; CI installs it (make deps)")
		}
		t.Skip("nft not found")
	}
	d, err := FromConfig(loadCatalog(t), "a1") // 10.244.1.0/24, fd00:244:0:1::/64
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		nft     []string
		blocked []string // substrings of the error; none: no error
	}{
		{"no firewall", nil, nil},
		{"forward policy accept", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy accept; }"}, nil},
		{"iptables-nft FORWARD policy drop", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }"},
			[]string{"table ip filter chain FORWARD has policy drop and no rule accepting 10.244.1.0/24"}},
		{"the proposed fix", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }",
			"add rule ip filter FORWARD ip saddr 10.244.1.0/24 counter accept", "add rule ip filter FORWARD ip daddr 10.244.1.0/24 counter accept"}, nil},
		{"a wider accept, in a chain jumped to", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }",
			"add chain ip filter CNI-FORWARD", "add rule ip filter FORWARD jump CNI-FORWARD", "add rule ip filter CNI-FORWARD ip saddr 10.244.0.0/16 accept"}, nil},
		{"an accept for another range", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }",
			"add rule ip filter FORWARD ip saddr 10.244.2.0/24 accept"}, []string{"no rule accepting 10.244.1.0/24"}},
		{"an accept with another condition", []string{"add table ip filter", "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }",
			`add rule ip filter FORWARD iifname "eth9" ip saddr 10.244.1.0/24 accept`}, []string{"no rule accepting 10.244.1.0/24"}},
		{"inet drop, IPv4 accepted only", []string{"add table inet fw", "add chain inet fw fw_forward { type filter hook forward priority 10; policy drop; }",
			"add rule inet fw fw_forward ip saddr 10.244.1.0/24 accept"},
			[]string{"table inet fw chain fw_forward has policy drop and no rule accepting fd00:244:0:1::/64"}},
		{"inet drop, both accepted", []string{"add table inet fw", "add chain inet fw fw_forward { type filter hook forward priority 10; policy drop; }",
			"add rule inet fw fw_forward ip saddr 10.244.1.0/24 accept", "add rule inet fw fw_forward ip6 saddr fd00:244::/56 accept"}, nil},
		{"ip6 drop", []string{"add table ip6 filter", "add chain ip6 filter FORWARD { type filter hook forward priority 0; policy drop; }"},
			[]string{"table ip6 filter chain FORWARD has policy drop and no rule accepting fd00:244:0:1::/64"}},
		{"an input chain with policy drop is not our business", []string{"add table ip filter", "add chain ip filter INPUT { type filter hook input priority 0; policy drop; }"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, _ := testNetns(t)
			h := NewHostNet(&ns, func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
			for _, cmd := range tt.nft {
				nsenterNft(t, nft, ns, cmd)
			}
			err := h.CheckForward(d)
			if len(tt.blocked) == 0 {
				if err != nil {
					t.Errorf("CheckForward: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckForward: nil, want an error with %q", tt.blocked)
			}
			for _, s := range append(tt.blocked, "iptables: -I FORWARD -s POD_CIDR -j ACCEPT") {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

// TestAgentHostStages: the agent's sync runs HostNet in a namespace
// whose FORWARD chain drops everything; the forward stage fails with
// the reason (Status, metrics) while the other stages carry on, and
// passes once the operator's accept rule is in, at the next sync.
func TestAgentHostStages(t *testing.T) {
	nft, err := exec.LookPath("nft")
	if err != nil {
		t.Skip("nft not found")
	}
	ns, _ := testNetns(t)
	host := NewHostNet(&ns, func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
	host.loadModule = func(string) error { return errors.New("the test loads no module") }
	nsenterNft(t, nft, ns, "add table ip filter")
	nsenterNft(t, nft, ns, "add chain ip filter FORWARD { type filter hook forward priority 0; policy drop; }")
	a1, _ := FromConfig(loadCatalog(t), "a1")
	a1.PodCIDR6 = netip.Prefix{} // IPv4 only: one accept rule fixes it
	rig := newRig(t, func(o *Options) { o.Host = host; o.RepairInterval = 50 * time.Millisecond })
	src := &fakeSource{models: []*Desired{a1}, errs: []error{nil}, changed: make(chan struct{}, 1)}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rig.agent.Run(ctx, src) }()
	defer func() { cancel(); <-done }()
	waitFor(t, "the forward stage to fail", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "forward") == 1 })
	sts := rig.status()
	last := sts[len(sts)-1]
	if !last.Configured || !last.CNIWritten || len(last.Errors) != 1 || last.Errors[0].Stage != "forward" ||
		!strings.Contains(last.Errors[0].Err, "table ip filter chain FORWARD has policy drop") {
		t.Errorf("status %+v, want configured, CNI written, forward failing", last)
	}
	nsenterNft(t, nft, ns, "add rule ip filter FORWARD ip saddr 10.244.1.0/24 accept")
	waitFor(t, "the forward stage to pass at a periodic sync", func() bool { return rig.metric(t, "bridgehead_node_last_error", "stage", "forward") == 0 })
	if st := rig.status(); !st[len(st)-1].OK() {
		t.Errorf("status %+v, want OK", st[len(st)-1])
	}
	if n := rig.metric(t, "bridgehead_node_errors_total", "stage", "bridge-netfilter"); n != 0 {
		t.Errorf("bridge-netfilter errors %v, want 0 (br_netfilter is loaded, the sysctl settable)", n)
	}
}

// TestHostNetForwardLegacy: iptables-legacy's FORWARD chains, which
// nftables does not show, are read from the kernel: policy DROP is
// reported unless a rule (directly, or in a chain FORWARD jumps to)
// accepts the node's block on a source match alone.
func TestHostNetForwardLegacy(t *testing.T) {
	ipt, err := exec.LookPath("iptables-legacy")
	ip6t, err6 := exec.LookPath("ip6tables-legacy")
	if err != nil || err6 != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("iptables-legacy not found; CI installs iptables")
		}
		t.Skip("iptables-legacy not found")
	}
	d, err := FromConfig(loadCatalog(t), "a1") // 10.244.1.0/24, fd00:244:0:1::/64
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		cmds    [][]string // each: the binary ("4" or "6") and its arguments
		blocked []string
	}{
		{"no legacy table", nil, nil},
		{"policy accept", [][]string{{"4", "-P", "FORWARD", "ACCEPT"}}, nil},
		{"policy drop", [][]string{{"4", "-P", "FORWARD", "DROP"}},
			[]string{"iptables-legacy table filter chain FORWARD has policy DROP and no rule accepting 10.244.1.0/24"}},
		{"policy drop, the proposed fix", [][]string{{"4", "-P", "FORWARD", "DROP"},
			{"4", "-A", "FORWARD", "-i", "eth9", "-j", "ACCEPT"},
			{"4", "-A", "FORWARD", "-s", "10.244.1.0/24", "-j", "ACCEPT"}, {"4", "-A", "FORWARD", "-d", "10.244.1.0/24", "-j", "ACCEPT"}}, nil},
		{"policy drop, accept in a jumped-to chain (Docker's DOCKER-USER)", [][]string{{"4", "-P", "FORWARD", "DROP"},
			{"4", "-N", "DOCKER-USER"}, {"4", "-N", "OTHER"}, {"4", "-A", "OTHER", "-s", "10.9.0.0/16", "-j", "ACCEPT"},
			{"4", "-A", "FORWARD", "-j", "OTHER"}, {"4", "-A", "FORWARD", "-j", "DOCKER-USER"},
			{"4", "-A", "DOCKER-USER", "-s", "10.244.0.0/16", "-j", "ACCEPT"}, {"4", "-A", "DOCKER-USER", "-j", "RETURN"}}, nil},
		{"policy drop, accept with a condition or inverted", [][]string{{"4", "-P", "FORWARD", "DROP"},
			{"4", "-A", "FORWARD", "-s", "10.244.1.0/24", "-i", "eth9", "-j", "ACCEPT"},
			{"4", "-A", "FORWARD", "!", "-s", "10.244.1.0/24", "-j", "ACCEPT"},
			{"4", "-A", "FORWARD", "-s", "10.244.1.0/24", "-p", "tcp", "-j", "ACCEPT"}},
			[]string{"iptables-legacy table filter chain FORWARD has policy DROP and no rule accepting 10.244.1.0/24"}},
		{"policy drop, accepts for other ranges only", [][]string{{"4", "-P", "FORWARD", "DROP"}, {"4", "-N", "X"},
			{"4", "-A", "FORWARD", "-s", "10.244.2.0/24", "-j", "ACCEPT"}, {"4", "-A", "FORWARD", "-j", "X"}, {"4", "-A", "X", "-s", "10.244.1.0/25", "-j", "ACCEPT"}},
			[]string{"iptables-legacy table filter chain FORWARD has policy DROP and no rule accepting 10.244.1.0/24"}},
		{"an accept after an unconditional drop", [][]string{{"4", "-A", "FORWARD", "-j", "DROP"},
			{"4", "-A", "FORWARD", "-s", "10.244.1.0/24", "-j", "ACCEPT"}}, nil}, // policy ACCEPT: only policies are read
		{"ip6tables policy drop", [][]string{{"6", "-P", "FORWARD", "DROP"}},
			[]string{"ip6tables-legacy table filter chain FORWARD has policy DROP and no rule accepting fd00:244:0:1::/64"}},
		{"ip6tables policy drop, accepted", [][]string{{"6", "-P", "FORWARD", "DROP"}, {"6", "-A", "FORWARD", "-s", "fd00:244::/56", "-j", "ACCEPT"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ns, _ := testNetns(t)
			h := NewHostNet(&ns, func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(ns))) })
			for _, c := range tt.cmds {
				bin := ipt
				if c[0] == "6" {
					bin = ip6t
				}
				nsenterRun(t, ns, bin, c[1:]...)
			}
			err := h.CheckForward(d)
			if len(tt.blocked) == 0 {
				if err != nil {
					t.Errorf("CheckForward: %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckForward: nil, want %q", tt.blocked)
			}
			for _, s := range tt.blocked {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

// nsenterRun runs bin with args in ns.
func nsenterRun(t *testing.T, ns netns.NsHandle, bin string, args ...string) {
	t.Helper()
	cmd := exec.Command("nsenter", append([]string{"--net=/proc/self/fd/3", bin}, args...)...)
	fd, err := unix.Dup(int(ns))
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "netns")
	defer f.Close()
	cmd.ExtraFiles = []*os.File{f}
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s %s: %v\n%s", bin, strings.Join(args, " "), err, out)
	}
}
