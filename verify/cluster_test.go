package verify

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"
)

// clusterNet is a healthy two-site cluster seen from a pod of site-b
// (labConfig), unless a test changes it.
type clusterNet struct {
	pathMTU map[netip.Addr]int // largest packet answered; absent: none
	mtu     int                // the pod's eth0
	tcp     map[netip.AddrPort]error
	dns     map[string][]netip.Addr
	dnsErr  error
	relay   int // CONNECT answer of the relay at 10.224.0.4:8131; 0: refused; <0: no answer
	// tooBigFrom, when set, answers packets over pathMTU with ICMP too-big.
	tooBigFrom netip.Addr
}

func healthyCluster() *clusterNet {
	a := netip.MustParseAddr
	return &clusterNet{
		pathMTU: map[netip.Addr]int{a("10.244.1.2"): 1420, a("10.245.1.3"): 1420},
		mtu:     1420,
		tcp: map[netip.AddrPort]error{
			netip.MustParseAddrPort("10.96.0.20:80"):    nil,
			netip.MustParseAddrPort("198.51.100.10:80"): nil,
		},
		dns:   map[string][]netip.Addr{"kubernetes.default.svc.cluster.local": {a("10.96.0.1")}},
		relay: 200,
	}
}

func (f *clusterNet) Ping(_ context.Context, src, dst netip.Addr, size int, _ time.Duration) (time.Duration, error) {
	if src.IsValid() {
		return 0, fmt.Errorf("pod probes leave from the kernel's source, not %s", src)
	}
	if size > f.mtu {
		return 0, syscall.EMSGSIZE
	}
	if m, ok := f.pathMTU[dst]; ok && size <= m {
		return 300 * time.Microsecond, nil
	}
	if m, ok := f.pathMTU[dst]; ok && f.tooBigFrom.IsValid() && size > m {
		return 0, &TooBigError{From: f.tooBigFrom, MTU: m}
	}
	return 0, errTimeout{}
}

func (f *clusterNet) Dial(_ context.Context, _ netip.Addr, dst netip.AddrPort, _ time.Duration) (net.Conn, error) {
	if dst == netip.MustParseAddrPort("10.224.0.4:8131") {
		if f.relay == 0 {
			return nil, syscall.ECONNREFUSED
		}
		if f.relay < 0 {
			return nil, errTimeout{}
		}
		client, server := net.Pipe()
		go func() {
			defer server.Close()
			req, err := http.ReadRequest(bufio.NewReader(server))
			if err != nil || req.RequestURI != "192.168.50.5:10250" {
				fmt.Fprint(server, "HTTP/1.1 400 Bad Request\r\n\r\n")
				return
			}
			fmt.Fprintf(server, "HTTP/1.1 %d %s\r\n\r\n", f.relay, http.StatusText(f.relay))
		}()
		return client, nil
	}
	err, ok := f.tcp[dst]
	if !ok {
		return nil, errTimeout{}
	}
	if err != nil {
		return nil, err
	}
	c, s := net.Pipe()
	s.Close()
	return c, nil
}

func (f *clusterNet) Route(netip.Addr) (Route, error)  { return Route{Dev: "eth0"}, nil }
func (f *clusterNet) Sysctl(string) (string, error)    { return "1", nil }
func (f *clusterNet) LinkMTU(name string) (int, error) { return f.mtu, nil }
func (f *clusterNet) Lookup(_ context.Context, server netip.AddrPort, name string, _ time.Duration) ([]netip.Addr, error) {
	if server != netip.MustParseAddrPort("10.96.0.10:53") {
		return nil, fmt.Errorf("asked %s, not the cluster DNS service", server)
	}
	if f.dnsErr != nil {
		return nil, f.dnsErr
	}
	if a, ok := f.dns[name]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: name, IsNotFound: true}
}

func clusterOptions(t *testing.T, n *clusterNet) ClusterOptions {
	a := netip.MustParseAddr
	return ClusterOptions{
		Config: labCfg(t), Site: "site-b", InPod: true, Net: n, Timeout: 250 * time.Millisecond, // the fakes answer at once; the relay pipe needs a goroutine to run on a loaded machine
		Pods:          []netip.Addr{a("10.244.1.2"), a("10.245.1.3")},
		Service:       netip.MustParseAddrPort("10.96.0.20:80"),
		DNS:           netip.MustParseAddrPort("10.96.0.10:53"),
		Egress:        netip.MustParseAddrPort("198.51.100.10:80"),
		CallbackRelay: netip.MustParseAddrPort("10.224.0.4:8131"),
		NodeAddr:      a("192.168.50.5"),
	}
}

func TestClusterHealthy(t *testing.T) {
	rep := RunCluster(context.Background(), clusterOptions(t, healthyCluster()))
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !rep.OK() || rep.Skip != 0 || rep.Passed != 6 {
		t.Fatalf("healthy cluster: %d passed, %d failed, %d skipped:\n%s", rep.Passed, rep.Failed, rep.Skip, buf.String())
	}
	for _, want := range []string{
		"site-a/10.244.1.2 via gateways", "site-b/10.245.1.3 direct", "icmp 0.30 ms, 1420 bytes",
		"kubernetes.default.svc.cluster.local @10.96.0.10:53", "10.96.0.1 in", "10.224.0.4:8131 -> 192.168.50.5:10250", "CONNECT 200",
	} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

func TestClusterFailures(t *testing.T) {
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		change func(n *clusterNet, o *ClusterOptions)
		// want: check -> result and a piece of its detail (or figure).
		want map[string][2]string
	}{
		{"gateway stopped", func(n *clusterNet, o *ClusterOptions) {
			delete(n.pathMTU, a("10.244.1.2"))
			delete(n.tcp, netip.MustParseAddrPort("10.96.0.20:80")) // its backend is in site-a
			n.relay = 0
		}, map[string][2]string{
			"pod":      {"FAIL", "through the gateways"},
			"service":  {"FAIL", "pod site-a/10.244.1.2 via gateways failed above: if the backend is in site-a"},
			"callback": {"SKIP", "needs pod site-a/10.244.1.2 via gateways, which failed above"},
		}},
		{"mtu lowered", func(n *clusterNet, o *ClusterOptions) { n.pathMTU[a("10.244.1.2")] = 1360 }, map[string][2]string{
			"pod": {"FAIL", "set it to 1360 or less"},
		}},
		{"dns stopped", func(n *clusterNet, o *ClusterOptions) {
			n.dnsErr = &net.DNSError{Err: "read udp 10.245.1.3:40000->10.96.0.10:53: connect: connection refused", Name: "x"}
		}, map[string][2]string{"dns": {"FAIL", "is CoreDNS running and listening"}}},
		{"dns silent", func(n *clusterNet, o *ClusterOptions) {
			n.dnsErr = &net.DNSError{Err: "i/o timeout", IsTimeout: true}
		}, map[string][2]string{"dns": {"FAIL", "no answer from the cluster DNS service 10.96.0.10:53"}}},
		{"wrong cluster domain", func(n *clusterNet, o *ClusterOptions) { o.ClusterDomain = "cluster.example" }, map[string][2]string{
			"dns": {"FAIL", `is the cluster domain "cluster.example"`},
		}},
		{"snat removed", func(n *clusterNet, o *ClusterOptions) { delete(n.tcp, netip.MustParseAddrPort("198.51.100.10:80")) }, map[string][2]string{
			"egress": {"FAIL", "SNAT by the node agent"},
		}},
		{"egress inside the cluster", func(n *clusterNet, o *ClusterOptions) { o.Egress = netip.MustParseAddrPort("10.244.1.2:80") }, map[string][2]string{
			"egress": {"FAIL", "not outside the cluster"},
		}},
		{"no endpoint", func(n *clusterNet, o *ClusterOptions) {
			n.tcp[netip.MustParseAddrPort("10.96.0.20:80")] = syscall.ECONNREFUSED
		}, map[string][2]string{"service": {"FAIL", "no ready endpoint"}}},
		{"kubelet down", func(n *clusterNet, o *ClusterOptions) { n.relay = 502 }, map[string][2]string{
			"callback": {"FAIL", "is the kubelet listening on 192.168.50.5:10250?"},
		}},
		// Only the callback goes to site-a: its gateway (and relay) down
		// is a relay that cannot be reached, not a slow kubelet dial.
		{"relay unreachable", func(n *clusterNet, o *ClusterOptions) {
			n.relay = -1
			o.Pods = o.Pods[1:]
		}, map[string][2]string{
			"callback": {"FAIL", "cannot connect to the relay: i/o timeout: is the relay listening on 10.224.0.4:8131, and is its gateway up"},
		}},
		{"peer snat", func(n *clusterNet, o *ClusterOptions) {
			o.Peers, o.PeerPort, o.PodAddr = fakePeers{seen: a("10.224.0.4")}, DefaultPeerPort, a("10.245.2.9")
		}, map[string][2]string{
			"pod": {"FAIL", "saw this pod's traffic come from 10.224.0.4, not 10.245.2.9: something SNATs pod traffic"},
		}},
		{"peer udp blocked", func(n *clusterNet, o *ClusterOptions) {
			o.Peers, o.PeerPort, o.PodAddr = fakePeers{err: errTimeout{}}, DefaultPeerPort, a("10.245.2.9")
		}, map[string][2]string{
			"pod": {"FAIL", "answers ping but not UDP 4790"},
		}},
		{"pod outside the cluster", func(n *clusterNet, o *ClusterOptions) { o.Pods = append(o.Pods, a("172.31.0.9")) }, map[string][2]string{
			"pod": {"FAIL", "in no site's CIDRs"},
		}},
		{"nothing given", func(n *clusterNet, o *ClusterOptions) {
			*o = ClusterOptions{Config: o.Config, Site: "site-b", Net: n, Timeout: time.Millisecond}
		}, map[string][2]string{
			"pod": {"SKIP", "--pod"}, "service": {"SKIP", "--service"}, "dns": {"SKIP", "--dns"},
			"egress": {"SKIP", "--egress"}, "callback": {"SKIP", "--callback-relay"},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := healthyCluster()
			o := clusterOptions(t, n)
			tc.change(n, &o)
			rep := RunCluster(context.Background(), o)
			var buf bytes.Buffer
			rep.WriteTable(&buf)
			for _, c := range rep.Checks {
				w, ok := tc.want[c.Name]
				if !ok {
					if c.Result != Pass {
						t.Errorf("%s %s: %s, want PASS:\n%s", c.Name, c.Target, c.Result, buf.String())
					}
					continue
				}
				if c.Result == Pass && c.Name == "pod" { // the other pod
					continue
				}
				if string(c.Result) != w[0] || !strings.Contains(c.Detail+" "+c.Figure, w[1]) {
					t.Errorf("%s %s: %s %q, want %s with %q", c.Name, c.Target, c.Result, c.Detail, w[0], w[1])
				}
			}
		})
	}
}

// TestClusterPathMTUDiscovery: pods whose MTU is above the tunnel's are
// fine when a router on the way says "too big" (PMTUD works); the same
// path without that answer is a black hole and fails.
func TestClusterPathMTUDiscovery(t *testing.T) {
	a := netip.MustParseAddr
	n := healthyCluster()
	n.mtu = 1500
	n.tooBigFrom = a("192.168.50.2")
	o := clusterOptions(t, n)
	o.Pods = o.Pods[:1]
	c := find(RunCluster(context.Background(), o), "pod")[0]
	if c.Result != Pass || c.Figure != "icmp 0.30 ms, path mtu 1420 < mtu 1500 (too-big from 192.168.50.2)" {
		t.Errorf("with PMTUD: %+v", c)
	}
	n.tooBigFrom = netip.Addr{}
	c = find(RunCluster(context.Background(), o), "pod")[0]
	if c.Result != Fail || c.Figure != "icmp 0.30 ms, 1420 bytes < mtu 1500" {
		t.Errorf("black hole: %+v", c)
	}
}

// TestTooBig reads ICMP "too big" answers about our echo, and no other.
func TestTooBig(t *testing.T) {
	dst4, dst6 := netip.MustParseAddr("10.244.1.2"), netip.MustParseAddr("fd00:244::2")
	v4 := func(id, seq int, to netip.Addr) []byte {
		b := []byte{3, 4, 0, 0, 0, 0, 0x05, 0x8c} // mtu 1420
		ip := make([]byte, 20)
		ip[0], ip[9] = 0x45, 1
		copy(ip[16:], to.AsSlice())
		b = append(b, ip...)
		return append(b, 8, 0, 0, 0, byte(id>>8), byte(id), byte(seq>>8), byte(seq))
	}
	v6 := func(id, seq int) []byte {
		b := []byte{2, 0, 0, 0, 0, 0, 0x05, 0x8c}
		ip := make([]byte, 40)
		ip[0], ip[6] = 0x60, 58
		copy(ip[24:], dst6.AsSlice())
		b = append(b, ip...)
		return append(b, 128, 0, 0, 0, byte(id>>8), byte(id), byte(seq>>8), byte(seq))
	}
	for _, tc := range []struct {
		name string
		msg  []byte
		dst  netip.Addr
		mtu  int
		ok   bool
	}{
		{"ipv4 ours", v4(7, 9, dst4), dst4, 1420, true},
		{"ipv4 other echo", v4(7, 10, dst4), dst4, 0, false},
		{"ipv4 other destination", v4(7, 9, netip.MustParseAddr("10.244.1.3")), dst4, 0, false},
		{"ipv4 port unreachable", append([]byte{3, 3}, v4(7, 9, dst4)[2:]...), dst4, 0, false},
		{"ipv4 truncated", v4(7, 9, dst4)[:20], dst4, 0, false},
		{"ipv6 ours", v6(7, 9), dst6, 1420, true},
		{"ipv6 other echo", v6(8, 9), dst6, 0, false},
		{"echo reply", []byte{0, 0, 0, 0, 0, 7, 0, 9}, dst4, 0, false},
	} {
		mtu, ok := tooBig(tc.msg, tc.dst, 7, 9)
		if mtu != tc.mtu || ok != tc.ok {
			t.Errorf("%s: %d %v, want %d %v", tc.name, mtu, ok, tc.mtu, tc.ok)
		}
	}
}

func FuzzTooBig(f *testing.F) {
	f.Add([]byte{3, 4, 0, 0, 0, 0, 5, 140}, true)
	f.Add([]byte{2, 0, 0, 0, 0, 0, 5, 140}, false)
	f.Fuzz(func(t *testing.T, msg []byte, v4 bool) {
		dst := netip.MustParseAddr("fd00:244::2")
		if v4 {
			dst = netip.MustParseAddr("10.244.1.2")
		}
		tooBig(msg, dst, 7, 9) // must not panic
	})
}

// fakePeers answers every hello with seen, or fails with err.
type fakePeers struct {
	seen netip.Addr
	err  error
}

func (f fakePeers) Hello(context.Context, netip.AddrPort, time.Duration) (netip.Addr, time.Duration, error) {
	return f.seen, time.Millisecond, f.err
}

// TestClusterPeers: verify pods of one run see each other's own
// addresses: the pod check says so.
func TestClusterPeers(t *testing.T) {
	o := clusterOptions(t, healthyCluster())
	o.Peers, o.PeerPort, o.PodAddr = fakePeers{seen: netip.MustParseAddr("10.245.2.9")}, DefaultPeerPort, netip.MustParseAddr("10.245.2.9")
	rep := RunCluster(context.Background(), o)
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !rep.OK() || strings.Count(buf.String(), "1420 bytes, source kept") != 2 {
		t.Fatalf("peers keep their addresses:\n%s", buf.String())
	}
}

// TestClusterCallbackDirect: in the site of the callback relay, the API
// server reaches the kubelet directly; verify connects to it rather than
// asking the relay, which relays only to other sites' nodes.
func TestClusterCallbackDirect(t *testing.T) {
	n := healthyCluster()
	o := clusterOptions(t, n)
	o.Site, o.NodeAddr = "site-a", netip.MustParseAddr("10.224.0.11")
	n.relay = 403
	n.tcp[netip.MustParseAddrPort("10.224.0.11:10250")] = nil
	rep := RunCluster(context.Background(), o)
	var buf bytes.Buffer
	rep.WriteTable(&buf)
	if !rep.OK() || !strings.Contains(buf.String(), "10.224.0.11:10250 (direct: the relay's own site)") {
		t.Errorf("callback in the relay's site:\n%s", buf.String())
	}
	delete(n.tcp, netip.MustParseAddrPort("10.224.0.11:10250"))
	if rep := RunCluster(context.Background(), o); rep.OK() {
		t.Error("a kubelet that does not answer passed")
	}
}
