package netpol

import (
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/nodeagent"
)

// Policy by podSelector and namespaceSelector needs the source pod's own
// address at the destination node: the agent's SNAT rule
// (nodeagent.SNAT, table inet bridgehead-node) must never masquerade a
// pod's traffic to another pod, of this site or any other. These tests
// fail if a change ever breaks that.

func testCatalog(t *testing.T) *config.Config {
	t.Helper()
	c, err := config.Load(filepath.Join("..", "testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if problems, _ := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); problems != nil {
		t.Fatalf("test catalog: %v", problems)
	}
	return c
}

// TestSNATSparesEveryPodRange: for every node of the catalog, every pod
// range of every site (the sites' podCIDRs and each node's block, both
// families) lies inside the model's ClusterCIDRs, the set the SNAT rule
// exempts ("ip daddr != @cluster4 masquerade").
func TestSNATSparesEveryPodRange(t *testing.T) {
	c := testCatalog(t)
	var ranges []netip.Prefix
	for _, s := range c.Sites {
		ranges = append(ranges, s.PodCIDRs...)
		for _, n := range s.Nodes {
			for _, p := range []netip.Prefix{n.PodCIDR, n.PodCIDR6} {
				if p.IsValid() {
					ranges = append(ranges, p)
				}
			}
		}
	}
	for _, s := range c.Sites {
		for _, n := range s.Nodes {
			d, err := nodeagent.FromConfig(c, n.Name)
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range ranges {
				if !covered(r, d.ClusterCIDRs) {
					t.Errorf("node %s: pod range %s is not in the SNAT exemption %v: its pods' traffic there would be masqueraded", n.Name, r, d.ClusterCIDRs)
				}
			}
		}
	}
}

func covered(p netip.Prefix, by []netip.Prefix) bool {
	for _, c := range by {
		if c.Bits() <= p.Bits() && c.Contains(p.Addr()) {
			return true
		}
	}
	return false
}

// TestSNATKeepsPodSource runs the agent's SNAT table in the lab's node,
// with the model of node a1 (whose block holds pod a) and pod b as a
// pod of site b: b sees a's own address, IPv4 and IPv6. Traffic from a
// to an address outside the cluster (on b's lo) is masqueraded, which
// shows the rule is live.
func TestSNATKeepsPodSource(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces; skipped with -short")
	}
	l := newLab(t)
	const outside, outside6 = "198.18.0.10", "2001:db8::10"
	ipn(t, l.b, "addr", "add", outside+"/32", "dev", "lo")
	ipn(t, l.b, "addr", "add", outside6+"/128", "dev", "lo")
	ipn(t, l.node, "route", "add", outside+"/32", "via", addrB)
	ipn(t, l.node, "route", "add", outside6+"/128", "via", addrB6)

	d, err := nodeagent.FromConfig(testCatalog(t), "a1")
	if err != nil {
		t.Fatal(err)
	}
	h, err := netns.GetFromName(l.node)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	snat := nodeagent.NewSNAT(func() (*nftables.Conn, error) { return nftables.New(nftables.WithNetNSFd(int(h))) })
	if _, err := snat.Ensure(d); err != nil {
		t.Fatal(err)
	}

	// b answers every connection with the address it came from.
	var lns []net.Listener
	in(t, l.b, func() {
		ln, err := net.Listen("tcp", ":7000")
		if err != nil {
			t.Fatal(err)
		}
		lns = append(lns, ln)
	})
	defer lns[0].Close()
	go func() {
		for {
			c, err := lns[0].Accept()
			if err != nil {
				return
			}
			host, _, _ := net.SplitHostPort(c.RemoteAddr().String())
			c.Write([]byte(host))
			c.Close()
		}
	}()
	seen := func(dst string) string {
		t.Helper()
		var got string
		deadline := time.Now().Add(10 * time.Second) // a failure bound (IPv6 neighbours come up first)
		for {
			var err error
			in(t, l.a, func() {
				var c net.Conn
				if c, err = net.DialTimeout("tcp", hp(dst, 7000), dropWait); err != nil {
					return
				}
				defer c.Close()
				c.SetDeadline(time.Now().Add(dropWait))
				var b []byte
				b, err = io.ReadAll(c)
				got = string(b)
			})
			if err == nil {
				return got
			}
			if time.Now().After(deadline) {
				t.Fatalf("a -> %s: %v", dst, err)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	for _, c := range []struct{ dst, want, why string }{
		{addrB, addrA, "pod to remote pod keeps its source"},
		{addrB6, addrA6, "pod to remote pod keeps its source (IPv6)"},
		{outside, "10.245.1.1", "pod to outside the cluster is masqueraded"},
		{outside6, "fd00:245:0:1::1", "pod to outside the cluster is masqueraded (IPv6)"},
	} {
		if got := seen(c.dst); got != c.want {
			t.Errorf("%s: b sees %s, want %s", c.why, got, c.want)
		}
	}
	if err := snat.Remove(); err != nil {
		t.Error(err)
	}
}
