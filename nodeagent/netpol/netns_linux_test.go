package netpol

import (
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// lab is three network namespaces: a node that routes between two pods,
// a and b, each on a veth pair (a0/na, b0/nb), dual-stack. The node's
// forward hook is where the policy table sits, as on a real node.
type lab struct {
	node, a, b string
}

// Addresses of the lab.
const (
	addrA  = "10.244.1.10"
	addrA6 = "fd00:244:0:1::10"
	addrB  = "10.245.1.10"
	addrB6 = "fd00:245:0:1::10"
)

func ipn(t testing.TB, ns string, args ...string) {
	t.Helper()
	if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
		t.Fatalf("ip -n %s %s: %v\n%s", ns, strings.Join(args, " "), err, out)
	}
}

func newLab(t testing.TB) *lab {
	t.Helper()
	l := &lab{node: netnstest.New(t, "bhnpn"), a: netnstest.New(t, "bhnpa"), b: netnstest.New(t, "bhnpb")}
	for _, p := range []struct{ ns, in, out, addr, addr6, gw, gw6 string }{
		{l.a, "a0", "na", addrA + "/24", addrA6 + "/64", "10.244.1.1", "fd00:244:0:1::1"},
		{l.b, "b0", "nb", addrB + "/24", addrB6 + "/64", "10.245.1.1", "fd00:245:0:1::1"},
	} {
		ipn(t, l.node, "link", "add", p.out, "type", "veth", "peer", "name", p.in, "netns", p.ns)
		ipn(t, l.node, "addr", "add", p.gw+"/24", "dev", p.out)
		ipn(t, l.node, "addr", "add", p.gw6+"/64", "dev", p.out, "nodad")
		ipn(t, l.node, "link", "set", p.out, "up")
		ipn(t, p.ns, "addr", "add", p.addr, "dev", p.in)
		ipn(t, p.ns, "addr", "add", p.addr6, "dev", p.in, "nodad")
		ipn(t, p.ns, "link", "set", p.in, "up")
		ipn(t, p.ns, "route", "add", "default", "via", p.gw)
		ipn(t, p.ns, "-6", "route", "add", "default", "via", p.gw6)
	}
	for _, s := range []string{"net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1"} {
		if out, err := exec.Command("ip", "netns", "exec", l.node, "sysctl", "-qw", s).CombinedOutput(); err != nil {
			t.Fatalf("sysctl %s: %v %s", s, err, out)
		}
	}
	return l
}

// in runs fn on a thread in namespace ns: sockets fn opens live there.
func in(t testing.TB, ns string, fn func()) {
	t.Helper()
	h, err := netns.GetFromName(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if err := netns.Set(h); err != nil {
			t.Error(err)
			return
		}
		fn()
	}()
	<-done
}

func (l *lab) table(t testing.TB) *Table {
	t.Helper()
	h, err := netns.GetFromName(l.node)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return NewTable(func(o ...nftables.ConnOption) (*nftables.Conn, error) {
		return nftables.New(append(o, nftables.WithNetNSFd(int(h)))...)
	})
}

// serve runs echo servers in ns on every address: TCP and UDP on ports.
func serve(t testing.TB, ns string, ports ...int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	in(t, ns, func() {
		for _, p := range ports {
			ln, err := net.Listen("tcp", fmt.Sprintf(":%d", p))
			if err != nil {
				t.Fatal(err)
			}
			pc, err := net.ListenPacket("udp", fmt.Sprintf(":%d", p))
			if err != nil {
				t.Fatal(err)
			}
			wg.Add(3)
			go func() { defer wg.Done(); <-ctx.Done(); ln.Close(); pc.Close() }()
			go func() {
				defer wg.Done()
				for {
					c, err := ln.Accept()
					if err != nil {
						return
					}
					go func() { defer c.Close(); io.Copy(c, c) }()
				}
			}()
			go func() {
				defer wg.Done()
				buf := make([]byte, 1500)
				for {
					n, from, err := pc.ReadFrom(buf)
					if err != nil {
						return
					}
					pc.WriteTo(buf[:n], from)
				}
			}()
		}
	})
}

// dropWait bounds how long a probe waits for an answer: a dropped packet
// never answers, an allowed one answers within a millisecond here.
const dropWait = 400 * time.Millisecond

// probe sends one message from ns to addr and reads it back.
func probe(t testing.TB, ns, network, addr string) error {
	t.Helper()
	var err error
	in(t, ns, func() {
		var c net.Conn
		c, err = net.DialTimeout(network, addr, dropWait)
		if err != nil {
			return
		}
		defer c.Close()
		err = echo(c)
	})
	return err
}

func echo(c net.Conn) error {
	c.SetDeadline(time.Now().Add(dropWait))
	if _, err := c.Write([]byte("ping")); err != nil {
		return err
	}
	buf := make([]byte, 4)
	_, err := io.ReadFull(c, buf)
	return err
}

type expect struct {
	from, network, addr string
	ok                  bool
}

func check(t *testing.T, l *lab, step string, cases []expect) {
	t.Helper()
	for _, e := range cases {
		ns := l.a
		if e.from == "b" {
			ns = l.b
		}
		err := probe(t, ns, e.network, e.addr)
		if (err == nil) != e.ok {
			t.Errorf("%s: %s %s from %s: err=%v, want allowed=%v", step, e.network, e.addr, e.from, err, e.ok)
		}
	}
}

func hp(host string, port int) string { return net.JoinHostPort(host, fmt.Sprint(port)) }

// TestEnforce loads compiled rulesets into a real nftables in the lab's
// node and checks accept and drop with real traffic, IPv4 and IPv6, TCP
// and UDP, ingress and egress, and that an established connection
// survives a policy change that refuses new ones.
func TestEnforce(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces; skipped with -short")
	}
	l := newLab(t)
	tbl := l.table(t)
	serve(t, l.b, 5432, 5433, 8080)
	serve(t, l.a, 9000)

	nss := []*corev1.Namespace{ns("web", "team", "web"), ns("db", "team", "db")}
	client := withIPs(mkPod("web", "client", "n1", map[string]string{"app": "client"}), addrA, addrA6)
	server := withIPs(mkPod("db", "pg", "n1", map[string]string{"app": "db"}), addrB, addrB6)
	server.Spec.Containers = []corev1.Container{{Name: "pg", Ports: []corev1.ContainerPort{{Name: "pg", ContainerPort: 5432, Protocol: corev1.ProtocolTCP}}}}
	pods := []*corev1.Pod{client, server}
	apply := func(pols ...*networkingv1.NetworkPolicy) *Ruleset {
		t.Helper()
		rs := Compile(Input{Node: "n1", Pods: slim(pods...), Namespaces: nss, Policies: pols})
		if err := tbl.Write(rs); err != nil {
			t.Fatalf("Write: %v\n%s", err, rs)
		}
		if fp, err := tbl.Current(); err != nil || fp != Fingerprint(rs) {
			t.Fatalf("Current = %q %v, want %q", fp, err, Fingerprint(rs))
		}
		return rs
	}
	b4, b6 := func(p int) string { return hp(addrB, p) }, func(p int) string { return hp(addrB6, p) }

	apply()
	// IPv6 neighbour discovery takes a moment after the links come up
	// (link-local addresses finish DAD): wait for every path first.
	deadline := time.Now().Add(10 * time.Second) // a failure bound
	for _, e := range []expect{{"a", "tcp", b6(5433), true}, {"b", "tcp", hp(addrA6, 9000), true}, {"a", "tcp", b4(5433), true}} {
		from := l.a
		if e.from == "b" {
			from = l.b
		}
		for probe(t, from, e.network, e.addr) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("lab: %s %s from %s never answers", e.network, e.addr, e.from)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	check(t, l, "no policy", []expect{
		{"a", "tcp", b4(5432), true}, {"a", "tcp", b4(5433), true}, {"a", "udp", b4(8080), true},
		{"a", "tcp", b6(5433), true},
	})

	// Only web's client may reach db on the named port pg.
	allowPG := policy("db", "allow-pg", map[string]string{"app": "db"}, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress},
		[]networkingv1.NetworkPolicyIngressRule{{
			From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "web"), PodSelector: sel("app", "client")}},
			Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg")},
		}}, nil)
	rs := apply(allowPG)
	t.Logf("allow-pg:\n%s", rs)
	check(t, l, "allow-pg", []expect{
		{"a", "tcp", b4(5432), true}, {"a", "tcp", b6(5432), true},
		{"a", "tcp", b4(5433), false}, {"a", "tcp", b6(5433), false},
		{"a", "udp", b4(8080), false},
		// b's own egress is not isolated, and a's ingress neither.
		{"b", "tcp", hp(addrA, 9000), true},
	})
	// The table counted what it allowed and dropped.
	ctrs, err := tbl.Counters()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range rs.Counters {
		if ctrs[c.Name] == 0 {
			t.Errorf("counter %s (%s %s %v) is 0 after the probes", c.Name, c.Dir, c.Verdict, c.Policies)
		}
	}

	// A connection opened under allow-pg survives a deny-all; a new
	// one is refused.
	var open net.Conn
	in(t, l.a, func() {
		var err error
		if open, err = net.DialTimeout("tcp", b4(5432), dropWait); err != nil {
			t.Fatal(err)
		}
	})
	defer open.Close()
	if err := echo(open); err != nil {
		t.Fatal(err)
	}
	denyAll := policy("db", "deny-all", map[string]string{}, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}, nil, nil)
	apply(denyAll)
	if err := echo(open); err != nil {
		t.Errorf("established connection after deny-all: %v", err)
	}
	check(t, l, "deny-all", []expect{{"a", "tcp", b4(5432), false}, {"a", "tcp", b6(5432), false}})

	// Egress of web's client: UDP 8080 and TCP 5433-5440 to db's
	// pods, and 10.245.0.0/16 except b's address on any port.
	egress := policy("web", "client-out", map[string]string{"app": "client"}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil,
		[]networkingv1.NetworkPolicyEgressRule{{
			To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "db")}},
			Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolUDP, 8080, 0), numPort(corev1.ProtocolTCP, 5433, 5440)},
		}, {
			To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "10.245.0.0/16", Except: []string{addrB + "/32"}}}},
		}})
	apply(egress)
	check(t, l, "egress", []expect{
		{"a", "udp", b4(8080), true}, {"a", "udp", b6(8080), true},
		{"a", "tcp", b4(5433), true}, {"a", "tcp", b6(5433), true},
		{"a", "tcp", b4(5432), false}, {"a", "tcp", b6(5432), false},
		// Replies to b's connections are established: b reaches a.
		{"b", "tcp", hp(addrA, 9000), true},
	})

	// Egress and ingress together: both must allow.
	apply(egress, allowPG)
	check(t, l, "egress+ingress", []expect{
		{"a", "tcp", b4(5433), false}, // egress allows, ingress does not
		{"a", "tcp", b4(5432), false}, // ingress allows, egress does not
		{"a", "udp", b4(8080), false},
	})
	allowAllIn := policy("db", "allow-all", map[string]string{"app": "db"}, nil, []networkingv1.NetworkPolicyIngressRule{{}}, nil)
	apply(egress, allowPG, allowAllIn)
	check(t, l, "egress+allow-all", []expect{{"a", "tcp", b4(5433), true}, {"a", "udp", b6(8080), true}, {"a", "tcp", b4(5432), false}})

	if err := tbl.Remove(); err != nil {
		t.Fatal(err)
	}
	check(t, l, "removed", []expect{{"a", "tcp", b4(5432), true}})
	if fp, err := tbl.Current(); fp != "" || err != nil {
		t.Errorf("Current after Remove = %q %v", fp, err)
	}
}

// TestServiceTraffic: traffic to a Service address, which kube-proxy
// translates (prerouting DNAT) before the forward hook, meets the
// policies of the endpoint pod it was sent to; and a pod reaching itself
// through its own Service (hairpin, masqueraded as kube-proxy does) is
// allowed whatever its policies, as the upstream suite expects.
func TestServiceTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("network namespaces; skipped with -short")
	}
	if _, err := exec.LookPath("nft"); err != nil {
		t.Skip("needs nft for the stand-in kube-proxy table")
	}
	l := newLab(t)
	tbl := l.table(t)
	serve(t, l.b, 5432)
	const svc, svc6 = "10.96.0.10", "fd00:96::10"
	// A stand-in for kube-proxy: DNAT of the Service to b, masquerade
	// of hairpin traffic.
	proxy := `table inet kube-proxy-standin {
	chain pre { type nat hook prerouting priority dstnat;
		ip daddr ` + svc + ` tcp dport 80 dnat ip to ` + addrB + `:5432
		ip6 daddr ` + svc6 + ` tcp dport 80 dnat ip6 to [` + addrB6 + `]:5432
	}
	chain post { type nat hook postrouting priority srcnat;
		ip saddr ` + addrB + ` ip daddr ` + addrB + ` masquerade
		ip6 saddr ` + addrB6 + ` ip6 daddr ` + addrB6 + ` masquerade
	}
}`
	cmd := exec.Command("ip", "netns", "exec", l.node, "nft", "-f", "-")
	cmd.Stdin = strings.NewReader(proxy)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nft: %v\n%s", err, out)
	}
	nss := []*corev1.Namespace{ns("web"), ns("db")}
	pods := []*corev1.Pod{
		withIPs(mkPod("web", "client", "n1", map[string]string{"app": "client"}), addrA, addrA6),
		withIPs(mkPod("db", "pg", "n1", map[string]string{"app": "db"}), addrB, addrB6),
	}
	write := func(pols ...*networkingv1.NetworkPolicy) {
		t.Helper()
		if err := tbl.Write(Compile(Input{Node: "n1", Pods: slim(pods...), Namespaces: nss, Policies: pols})); err != nil {
			t.Fatal(err)
		}
	}
	write()
	deadline := time.Now().Add(10 * time.Second) // a failure bound (IPv6 neighbours)
	for _, e := range []expect{{"a", "tcp", hp(svc6, 80), true}, {"b", "tcp", hp(svc6, 80), true}, {"a", "tcp", hp(svc, 80), true}} {
		ns := l.a
		if e.from == "b" {
			ns = l.b
		}
		for probe(t, ns, e.network, e.addr) != nil {
			if time.Now().After(deadline) {
				t.Fatalf("lab: %s from %s never answers", e.addr, e.from)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	// db denies every ingress, and egress too.
	write(policy("db", "deny", map[string]string{}, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, nil, nil))
	check(t, l, "deny via the Service", []expect{
		{"a", "tcp", hp(svc, 80), false}, {"a", "tcp", hp(svc6, 80), false},
		{"b", "tcp", hp(svc, 80), true}, {"b", "tcp", hp(svc6, 80), true}, // itself
	})
	// Allowed from web's client: through the Service too.
	write(policy("db", "deny", map[string]string{}, nil, []networkingv1.NetworkPolicyIngressRule{{
		From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("kubernetes.io/metadata.name", "web")}},
		Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 5432, 0)},
	}}, nil))
	check(t, l, "allow via the Service", []expect{{"a", "tcp", hp(svc, 80), true}, {"a", "tcp", hp(svc6, 80), true}})
}
