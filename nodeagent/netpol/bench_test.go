package netpol

import (
	"context"
	"fmt"
	"net/netip"
	"os/exec"
	"runtime"
	"testing"
	"time"

	"github.com/google/nftables"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// scale is a synthetic cluster: 100 namespaces of 100 pods (10,000
// pods, dual-stack, on 100 nodes: "n0".."n99", 100 pods each spread over
// every namespace) and 10 policies a namespace (1,000 policies), of the
// kinds people write:
//
//	0 default deny ingress and egress for the namespace
//	1 allow ingress from the same app in the namespace, TCP 8080
//	2 allow ingress from team=<t> namespaces' frontends, named port http
//	3 allow ingress from an ipBlock with two excepts, TCP 443
//	4 allow egress to kube-system's DNS pods, UDP and TCP 53
//	5 allow egress to the namespace's db pods, named port pg
//	6 allow ingress from monitoring namespaces, TCP 9100-9110
//	7 allow ingress from every pod of the namespace (podSelector {})
//	8 allow egress to 0.0.0.0/0 except the cluster, TCP 443
//	9 allow ingress SCTP 3868 and UDP 5060 from anywhere
func scale(nsCount, podsPerNS, nodes int) Input {
	in := Input{Node: "n0"}
	for n := range nsCount {
		name := fmt.Sprintf("ns%d", n)
		in.Namespaces = append(in.Namespaces, ns(name, "team", fmt.Sprint("t", n%10), "role", []string{"app", "monitoring"}[min(n%20, 1)]))
		for i := range podsPerNS {
			k := n*podsPerNS + i
			p := mkPod(name, fmt.Sprintf("p%d", i), fmt.Sprintf("n%d", k%nodes),
				map[string]string{"app": fmt.Sprint("a", i%10), "role": []string{"frontend", "backend", "db", "dns"}[i%4]})
			p = withIPs(p, netip.AddrFrom4([4]byte{10, byte(k >> 16), byte(k >> 8), byte(k)}).String(),
				fmt.Sprintf("fd00::%x", k+1))
			p = withPort(p, "http", corev1.ProtocolTCP, int32(8000+i%10))
			p = withPort(p, "pg", corev1.ProtocolTCP, 5432)
			in.Pods = append(in.Pods, FromPod(p))
		}
	}
	tcp, udp, sctp := corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP
	for n := range nsCount {
		name := fmt.Sprintf("ns%d", n)
		all := map[string]string{}
		pols := []*networkingv1.NetworkPolicy{
			policy(name, "deny", all, []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}, nil, nil),
			policy(name, "same-app", map[string]string{"app": fmt.Sprint("a", n%10)}, nil, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{PodSelector: sel("app", fmt.Sprint("a", n%10))}},
				Ports: []networkingv1.NetworkPolicyPort{numPort(tcp, 8080, 0)},
			}}, nil),
			policy(name, "from-team", map[string]string{"role": "backend"}, nil, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", fmt.Sprint("t", n%10)), PodSelector: sel("role", "frontend")}},
				Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("http")},
			}}, nil),
			policy(name, "ipblock", map[string]string{"role": "frontend"}, nil, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8", "192.168.0.0/16"}}}},
				Ports: []networkingv1.NetworkPolicyPort{numPort(tcp, 443, 0)},
			}}, nil),
			policy(name, "dns", all, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil, []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "t0"), PodSelector: sel("role", "dns")}},
				Ports: []networkingv1.NetworkPolicyPort{numPort(udp, 53, 0), numPort(tcp, 53, 0)},
			}}),
			policy(name, "to-db", map[string]string{"role": "backend"}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil, []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{PodSelector: sel("role", "db")}},
				Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg")},
			}}),
			policy(name, "monitoring", all, nil, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("role", "monitoring")}},
				Ports: []networkingv1.NetworkPolicyPort{numPort(tcp, 9100, 9110)},
			}}, nil),
			policy(name, "same-ns", map[string]string{"role": "db"}, nil, []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
			}}, nil),
			policy(name, "https-out", map[string]string{"role": "frontend"}, []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}, nil, []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0", Except: []string{"10.0.0.0/8"}}}},
				Ports: []networkingv1.NetworkPolicyPort{numPort(tcp, 443, 0)},
			}}),
			policy(name, "telco", map[string]string{"app": "a9"}, nil, []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{numPort(sctp, 3868, 0), numPort(udp, 5060, 0)},
			}}, nil),
		}
		in.Policies = append(in.Policies, pols...)
	}
	return in
}

// cpuTime is the process's user and system CPU time: on a shared,
// loaded machine it says more than the wall time, which includes
// waiting for a CPU. The kernel's work in a write is system time of the
// writing thread.
func cpuTime() time.Duration {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportSize(b *testing.B, rs *Ruleset) {
	b.ReportMetric(float64(rs.Stats.LocalPolicies), "local-policies")
	b.ReportMetric(float64(rs.Stats.Chains), "chains")
	b.ReportMetric(float64(rs.Stats.Rules), "rules")
	b.ReportMetric(float64(rs.Stats.Sets), "sets")
	b.ReportMetric(float64(rs.Stats.Elements), "set-elements")
	b.ReportMetric(float64(rs.Stats.Dispatch), "map-elements")
	b.ReportMetric(float64(len(rs.String())), "text-bytes")
}

// BenchmarkCompile: 1,000 policies over 10,000 pods. "node" is one of
// 100 nodes (100 local pods, as on a real node); "all-local" puts every
// pod on this node, the compiler's worst case (every policy compiled).
func BenchmarkCompile(b *testing.B) {
	for _, c := range []struct {
		name  string
		nodes int
	}{{"node", 100}, {"all-local", 1}} {
		in := scale(100, 100, c.nodes)
		b.Run(c.name, func(b *testing.B) {
			var rs *Ruleset
			b.ReportAllocs()
			cpu := cpuTime()
			for b.Loop() {
				rs = Compile(in)
			}
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
			reportSize(b, rs)
		})
	}
}

// BenchmarkWrite writes the compiled 1,000 policies / 10,000 pods into a
// real nftables (a network namespace; root) in one transaction, and
// reports the size of `nft list ruleset` there. The no-counters cases
// write the same rules without the named verdict counters: the
// difference is what the counters cost a write.
func BenchmarkWrite(b *testing.B) {
	for _, c := range []struct {
		name     string
		nodes    int
		counters bool
	}{{"node", 100, true}, {"all-local", 1, true}, {"node-no-counters", 100, false}, {"all-local-no-counters", 1, false}} {
		rs := Compile(scale(100, 100, c.nodes))
		if !c.counters {
			rs = withoutCounters(rs)
		}
		b.Run(c.name, func(b *testing.B) {
			name := netnstest.New(b, "bhnpbench")
			h, err := netns.GetFromName(name)
			if err != nil {
				b.Fatal(err)
			}
			defer h.Close()
			tbl := NewTable(func(o ...nftables.ConnOption) (*nftables.Conn, error) {
				return nftables.New(append(o, nftables.WithNetNSFd(int(h)))...)
			})
			cpu := cpuTime()
			for b.Loop() {
				if err := tbl.Write(rs); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64((cpuTime()-cpu).Milliseconds())/float64(b.N), "cpu-ms/op")
			reportSize(b, rs)
			b.ReportMetric(float64(len(rs.Counters)), "counters")
			// A scrape reads every named counter back (verdicts).
			t0 := time.Now()
			if _, err := tbl.Counters(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(time.Since(t0).Microseconds())/1000, "scrape-read-ms")
			b.ReportMetric(nftListBytes(b, name), "nft-list-bytes")
		})
	}
}

// nftListBytes is the size of `nft list ruleset` in ns: the rule set as
// the kernel holds it, in nft's syntax (0 without nft).
func nftListBytes(b *testing.B, ns string) float64 {
	b.Helper()
	out, err := exec.CommandContext(context.Background(), "ip", "netns", "exec", ns, "nft", "list", "ruleset").Output()
	if err != nil {
		b.Logf("nft list ruleset: %v", err)
		return 0
	}
	return float64(len(out))
}

// withoutCounters is rs with no named counter (the verdict counters'
// cost is the difference: BenchmarkWrite's no-counters cases).
func withoutCounters(rs *Ruleset) *Ruleset {
	out := *rs
	out.Counters = nil
	out.Chains = make([]Chain, len(rs.Chains))
	for i, c := range rs.Chains {
		c.Rules = append([]Rule(nil), c.Rules...)
		for j := range c.Rules {
			c.Rules[j].Counter = ""
		}
		out.Chains[i] = c
	}
	return &out
}

// BenchmarkStoreMemory: what the pod informer's store holds a pod,
// after StripPod, of a realistically filled Pod.
func BenchmarkStoreMemory(b *testing.B) {
	const n = 10000
	full := func(i int) *corev1.Pod {
		p := withPort(withIPs(mkPod("ns", fmt.Sprint("pod-", i), "node-1", map[string]string{
			"app.kubernetes.io/name": "web", "app.kubernetes.io/instance": fmt.Sprint("web-", i%7), "pod-template-hash": "7d9f8c6b5d"}),
			"10.1.2.3", "fd00::1"), "http", corev1.ProtocolTCP, 8080)
		p.UID = "6a1d5e7c-7c2f-4d7e-9b55-0d1f1e2a3b4c"
		p.Annotations = map[string]string{"kubectl.kubernetes.io/restartedAt": "2026-12-01T00:00:00Z"}
		c := &p.Spec.Containers[0]
		c.Image = "registry.example.com/team/web:1.2.3"
		c.Env = []corev1.EnvVar{{Name: "A", Value: "a"}, {Name: "B", Value: "b"}}
		c.Resources.Requests = corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}
		p.Status.Conditions = make([]corev1.PodCondition, 4)
		p.Status.ContainerStatuses = []corev1.ContainerStatus{{Name: "c", Image: c.Image, ImageID: "sha256:0123"}}
		return p
	}
	for _, c := range []struct {
		name  string
		strip bool
	}{{"full", false}, {"stripped", true}} {
		b.Run(c.name, func(b *testing.B) {
			var perPod float64
			for b.Loop() {
				keep := make([]any, n)
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				for i := range n {
					var o any = full(i)
					if c.strip {
						o, _ = StripPod(o)
					}
					keep[i] = o
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perPod = float64(after.HeapAlloc-before.HeapAlloc) / n
				runtime.KeepAlive(keep)
			}
			b.ReportMetric(perPod, "heap-bytes/pod")
		})
	}
}
