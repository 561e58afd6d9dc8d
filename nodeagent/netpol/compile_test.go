package netpol

import (
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// render prints a ruleset with every set reference replaced by the
// set's elements and every chain name by its direction and policies,
// so that expectations read without hashes.
func render(rs *Ruleset) string {
	sets := map[string]string{}
	for _, s := range rs.Sets {
		sets[s.Name] = "{" + strings.TrimSuffix(strings.TrimPrefix(s.String(), s.Name+" { "), " }") + "}"
	}
	chains := map[string]string{}
	for _, c := range rs.Chains {
		chains[c.Name] = fmt.Sprintf("%s[%s]", c.Dir, strings.Join(c.Policies, ","))
	}
	ref := regexp.MustCompile(`@([an][46]-[0-9a-f]{16})`)
	counterRef := regexp.MustCompile(`counter name "[^"]+"`)
	var b strings.Builder
	for _, d := range rs.Dispatch {
		fmt.Fprintf(&b, "%s %s -> %s\n", d.Dir, d.Addr, chains[d.Chain])
	}
	for _, c := range rs.Chains {
		fmt.Fprintf(&b, "%s:\n", chains[c.Name])
		for _, r := range c.Rules {
			line := ref.ReplaceAllStringFunc(r.String(), func(m string) string { return sets[m[1:]] })
			fmt.Fprintf(&b, "  %s\n", counterRef.ReplaceAllString(line, "counter"))
		}
	}
	return b.String()
}

func TestCompile(t *testing.T) {
	nss := []*corev1.Namespace{ns("web", "team", "web"), ns("db", "team", "db"), ns("batch", "team", "batch")}
	pods := []*corev1.Pod{
		// This node's (n1): pg and pg2 in db, client in web.
		withPort(withIPs(mkPod("db", "pg", "n1", map[string]string{"app": "db"}), "10.244.1.10", "fd00:244:0:1::10"), "pg", corev1.ProtocolTCP, 5432),
		withPort(withIPs(mkPod("db", "pg2", "n1", map[string]string{"app": "db", "tier": "replica"}), "10.244.1.11"), "pg", corev1.ProtocolTCP, 6432),
		withIPs(mkPod("web", "client", "n1", map[string]string{"app": "client"}), "10.244.1.20", "fd00:244:0:1::20"),
		// Another site's node (b1): a client in web, one in batch.
		withIPs(mkPod("web", "client-b", "b1", map[string]string{"app": "client"}), "10.245.1.20", "fd00:245:0:1::20"),
		withPort(withIPs(mkPod("batch", "job", "b1", map[string]string{"app": "client"}), "10.245.1.30"), "metrics", corev1.ProtocolUDP, 9100),
		// A db pod on b1: selected by db's policies, but not this
		// node's to enforce.
		withIPs(mkPod("db", "pg-b", "b1", map[string]string{"app": "db"}), "10.245.1.10"),
	}
	hostNet := withIPs(mkPod("web", "hostnet", "b1", map[string]string{"app": "client"}), "192.168.50.11")
	hostNet.Spec.HostNetwork = true
	failed := withIPs(mkPod("web", "done", "b1", map[string]string{"app": "client"}), "10.245.1.99")
	failed.Status.Phase = corev1.PodFailed
	noIP := mkPod("web", "pending", "b1", map[string]string{"app": "client"})
	pods = append(pods, hostNet, failed, noIP)

	ingressOnly := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	egressOnly := []networkingv1.PolicyType{networkingv1.PolicyTypeEgress}
	both := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress}
	db := map[string]string{"app": "db"}
	tests := []struct {
		name  string
		pols  []*networkingv1.NetworkPolicy
		want  string
		check func(t *testing.T, rs *Ruleset)
	}{
		{name: "no policies", want: ""},
		{
			name: "default deny ingress",
			pols: []*networkingv1.NetworkPolicy{policy("db", "deny", map[string]string{}, ingressOnly, nil, nil)},
			want: `ingress 10.244.1.10 -> ingress[db/deny]
ingress 10.244.1.11 -> ingress[db/deny]
ingress fd00:244:0:1::10 -> ingress[db/deny]
ingress[db/deny]:
  counter drop
`,
			// The isolated local pods may reach themselves.
			check: func(t *testing.T, rs *Ruleset) {
				want(t, fmt.Sprint(rs.Self), "[10.244.1.10 10.244.1.11 fd00:244:0:1::10]")
			},
		},
		{
			name: "default deny both directions",
			pols: []*networkingv1.NetworkPolicy{policy("web", "deny", map[string]string{}, both, nil, nil)},
			want: `ingress 10.244.1.20 -> ingress[web/deny]
ingress fd00:244:0:1::20 -> ingress[web/deny]
egress 10.244.1.20 -> egress[web/deny]
egress fd00:244:0:1::20 -> egress[web/deny]
egress[web/deny]:
  counter drop
ingress[web/deny]:
  counter drop
`,
		},
		{
			name: "policy that selects no pod of this node",
			pols: []*networkingv1.NetworkPolicy{policy("batch", "deny", map[string]string{}, both, nil, nil)},
			want: "",
		},
		{
			// Both selectors in one peer: pods labelled app=client in
			// namespaces labelled team=web, on any node; not the
			// hostNetwork, finished or address-less pods.
			name: "namespace and pod selector together",
			pols: []*networkingv1.NetworkPolicy{policy("db", "from-web-clients", db, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "web"), PodSelector: sel("app", "client")}},
			}}, nil)},
			want: `ingress 10.244.1.10 -> ingress[db/from-web-clients]
ingress 10.244.1.11 -> ingress[db/from-web-clients]
ingress fd00:244:0:1::10 -> ingress[db/from-web-clients]
ingress[db/from-web-clients]:
  ip saddr {10.244.1.20, 10.245.1.20} counter accept
  ip6 saddr {fd00:244:0:1::20, fd00:245:0:1::20} counter accept
  counter drop
`,
		},
		{
			// Two peers: either matches. A namespaceSelector alone
			// takes every pod of batch; a podSelector alone the
			// policy's own namespace (db).
			name: "namespace selector or pod selector",
			pols: []*networkingv1.NetworkPolicy{policy("db", "or", map[string]string{"tier": "replica"}, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "batch")}, {PodSelector: sel("app", "db")}},
			}}, nil)},
			want: `ingress 10.244.1.11 -> ingress[db/or]
ingress[db/or]:
  ip saddr {10.244.1.10-10.244.1.11, 10.245.1.10, 10.245.1.30} counter accept
  ip6 saddr {fd00:244:0:1::10} counter accept
  counter drop
`,
		},
		{
			name: "ipBlock with except, both families",
			pols: []*networkingv1.NetworkPolicy{policy("db", "blocks", map[string]string{"tier": "replica"}, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From: []networkingv1.NetworkPolicyPeer{
					{IPBlock: &networkingv1.IPBlock{CIDR: "10.0.0.0/8", Except: []string{"10.244.0.0/16", "10.245.1.0/24"}}},
					{IPBlock: &networkingv1.IPBlock{CIDR: "fd00::/16", Except: []string{"fd00:245::/32"}}},
				},
			}}, nil)},
			want: `ingress 10.244.1.11 -> ingress[db/blocks]
ingress[db/blocks]:
  ip saddr {10.0.0.0-10.243.255.255, 10.245.0.0-10.245.0.255, 10.245.2.0-10.255.255.255} counter accept
  ip6 saddr {fd00::-fd00:244:ffff:ffff:ffff:ffff:ffff:ffff, fd00:246::-fd00:ffff:ffff:ffff:ffff:ffff:ffff:ffff} counter accept
  counter drop
`,
		},
		{
			// Numbered ports with a range, UDP and SCTP; a rule
			// without peers matches the ports alone.
			name: "ports, endPort, protocols",
			pols: []*networkingv1.NetworkPolicy{policy("db", "ports", map[string]string{"tier": "replica"}, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 5432, 0), numPort(corev1.ProtocolUDP, 30000, 30100), numPort(corev1.ProtocolSCTP, 9000, 0), {}},
			}, {
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "batch")}},
				Ports: []networkingv1.NetworkPolicyPort{{Protocol: ptr(corev1.ProtocolUDP)}},
			}}, nil)},
			want: `ingress 10.244.1.11 -> ingress[db/ports]
ingress[db/ports]:
  meta l4proto tcp th dport 5432 counter accept
  meta l4proto udp th dport 30000-30100 counter accept
  meta l4proto sctp th dport 9000 counter accept
  meta l4proto tcp counter accept
  ip saddr {10.245.1.30} meta l4proto udp counter accept
  counter drop
`,
		},
		{
			// Ingress named ports resolve on each selected pod: pg is
			// 5432 on pg and 6432 on pg2.
			name: "named port, ingress",
			pols: []*networkingv1.NetworkPolicy{policy("db", "named", db, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{
				From:  []networkingv1.NetworkPolicyPeer{{NamespaceSelector: sel("team", "web")}},
				Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg"), numPort(corev1.ProtocolTCP, 8080, 0)},
			}}, nil)},
			want: `ingress 10.244.1.10 -> ingress[db/named]
ingress 10.244.1.11 -> ingress[db/named]
ingress fd00:244:0:1::10 -> ingress[db/named]
ingress[db/named]:
  ip saddr {10.244.1.20, 10.245.1.20} meta l4proto tcp th dport 8080 counter accept
  ip saddr {10.244.1.20, 10.245.1.20} ip daddr . meta l4proto . th dport {10.244.1.10 . tcp . 5432, 10.244.1.11 . tcp . 6432} counter accept
  ip6 saddr {fd00:244:0:1::20, fd00:245:0:1::20} meta l4proto tcp th dport 8080 counter accept
  ip6 saddr {fd00:244:0:1::20, fd00:245:0:1::20} ip6 daddr . meta l4proto . th dport {fd00:244:0:1::10 . tcp . 5432} counter accept
  counter drop
`,
		},
		{
			// Egress named ports resolve on the peers; the protocol
			// must match the container port's (metrics is UDP).
			name: "named port, egress",
			pols: []*networkingv1.NetworkPolicy{policy("web", "out", map[string]string{"app": "client"}, egressOnly, nil, []networkingv1.NetworkPolicyEgressRule{{
				To:    []networkingv1.NetworkPolicyPeer{{NamespaceSelector: &metav1.LabelSelector{}}},
				Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg"), {Protocol: ptr(corev1.ProtocolUDP), Port: policyNamedPort("metrics").Port}, {Port: policyNamedPort("metrics").Port}},
			}, {
				Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("pg")},
			}})},
			want: `egress 10.244.1.20 -> egress[web/out]
egress fd00:244:0:1::20 -> egress[web/out]
egress[web/out]:
  ip daddr . meta l4proto . th dport {10.244.1.10 . tcp . 5432, 10.244.1.11 . tcp . 6432, 10.245.1.30 . udp . 9100} counter return
  ip6 daddr . meta l4proto . th dport {fd00:244:0:1::10 . tcp . 5432} counter return
  ip daddr . meta l4proto . th dport {10.244.1.10 . tcp . 5432, 10.244.1.11 . tcp . 6432} counter return
  ip6 daddr . meta l4proto . th dport {fd00:244:0:1::10 . tcp . 5432} counter return
  counter drop
`,
		},
		{
			// A pod selected by two policies gets one chain with both
			// policies' rules; a pod selected by one its own. An empty
			// rule allows everything.
			name: "policies add up",
			pols: []*networkingv1.NetworkPolicy{
				policy("db", "all", db, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{numPort(corev1.ProtocolTCP, 22, 0)}}}, nil),
				policy("db", "replica", map[string]string{"tier": "replica"}, ingressOnly, []networkingv1.NetworkPolicyIngressRule{{}}, nil),
			},
			want: `ingress 10.244.1.10 -> ingress[db/all]
ingress 10.244.1.11 -> ingress[db/all,db/replica]
ingress fd00:244:0:1::10 -> ingress[db/all]
ingress[db/all]:
  meta l4proto tcp th dport 22 counter accept
  counter drop
ingress[db/all,db/replica]:
  meta l4proto tcp th dport 22 counter accept
  counter accept
  counter drop
`,
			// One allow counter per policy and direction (shared by
			// both chains), one drop counter per chain.
			check: func(t *testing.T, rs *Ruleset) {
				var got []string
				for _, c := range rs.Counters {
					got = append(got, fmt.Sprintf("%s %s %v", c.Dir, c.Verdict, c.Policies))
				}
				slices.Sort(got)
				want(t, strings.Join(got, "; "), "ingress accept [db/all]; ingress accept [db/replica]; ingress drop [db/all db/replica]; ingress drop [db/all]")
			},
		},
		{
			// No policyTypes: Ingress, and Egress because there are
			// egress rules. Egress allows return (on to the ingress
			// check); the ingress has no rules: deny.
			name: "policyTypes defaulted",
			pols: []*networkingv1.NetworkPolicy{policy("web", "dflt", map[string]string{"app": "client"}, nil, nil, []networkingv1.NetworkPolicyEgressRule{{
				To: []networkingv1.NetworkPolicyPeer{{IPBlock: &networkingv1.IPBlock{CIDR: "0.0.0.0/0"}}},
			}})},
			want: `ingress 10.244.1.20 -> ingress[web/dflt]
ingress fd00:244:0:1::20 -> ingress[web/dflt]
egress 10.244.1.20 -> egress[web/dflt]
egress fd00:244:0:1::20 -> egress[web/dflt]
egress[web/dflt]:
  ip daddr {0.0.0.0-255.255.255.255} counter return
  counter drop
ingress[web/dflt]:
  counter drop
`,
		},
		{
			name: "a selector that does not parse is left out",
			pols: []*networkingv1.NetworkPolicy{{
				ObjectMeta: metav1.ObjectMeta{Namespace: "db", Name: "bad"},
				Spec:       networkingv1.NetworkPolicySpec{PodSelector: metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: "Bogus"}}}},
			}},
			want:  "",
			check: func(t *testing.T, rs *Ruleset) { want(t, rs.Stats.Invalid, 1) },
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rs := Compile(Input{Node: "n1", Pods: slim(pods...), Namespaces: nss, Policies: tt.pols})
			if got := render(rs); got != tt.want {
				t.Errorf("got:\n%s\nwant:\n%s\nruleset:\n%s", got, tt.want, rs)
			}
			if tt.check != nil {
				tt.check(t, rs)
			}
			// Stable: the same input, the same fingerprint.
			if again := Compile(Input{Node: "n1", Pods: slim(pods...), Namespaces: nss, Policies: tt.pols}); Fingerprint(again) != Fingerprint(rs) {
				t.Errorf("two compiles of one input differ:\n%s\n%s", rs, again)
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }

func want[T comparable](t *testing.T, got, want T) {
	t.Helper()
	if got != want {
		t.Errorf("got %v, want %v", got, want)
	}
}

// TestSetsShared: rules with the same peers share one set, whichever
// policy they come from.
func TestSetsShared(t *testing.T) {
	nss := []*corev1.Namespace{ns("a")}
	var pods []*corev1.Pod
	for i := range 10 {
		pods = append(pods, withIPs(mkPod("a", fmt.Sprint("p", i), "n1", map[string]string{"app": fmt.Sprint(i)}), fmt.Sprintf("10.0.0.%d", i+1)))
	}
	var pols []*networkingv1.NetworkPolicy
	for i := range 10 {
		pols = append(pols, policy("a", fmt.Sprint("np", i), map[string]string{"app": fmt.Sprint(i)}, nil, []networkingv1.NetworkPolicyIngressRule{{
			From: []networkingv1.NetworkPolicyPeer{{PodSelector: &metav1.LabelSelector{}}},
		}}, nil))
	}
	rs := Compile(Input{Node: "n1", Pods: slim(pods...), Namespaces: nss, Policies: pols})
	want(t, rs.Stats.Sets, 1)
	want(t, rs.Stats.Elements, 1) // 10.0.0.1-10.0.0.10: one interval
	want(t, rs.Stats.Chains, 10)
	want(t, rs.Stats.LocalPods, 10)
}

func TestSubtract(t *testing.T) {
	r := func(a, b string) AddrRange { return AddrRange{netip.MustParseAddr(a), netip.MustParseAddr(b)} }
	for _, tt := range []struct {
		cidr    string
		excepts []string
		want    []AddrRange
	}{
		{"10.0.0.0/24", nil, []AddrRange{r("10.0.0.0", "10.0.0.255")}},
		{"10.0.0.0/24", []string{"10.0.0.0/24"}, nil},
		{"10.0.0.0/24", []string{"10.0.0.0/25"}, []AddrRange{r("10.0.0.128", "10.0.0.255")}},
		{"10.0.0.0/24", []string{"10.0.0.128/25", "10.0.0.16/28"}, []AddrRange{r("10.0.0.0", "10.0.0.15"), r("10.0.0.32", "10.0.0.127")}},
		{"10.0.0.0/24", []string{"10.1.0.0/16", "fd00::/8"}, []AddrRange{r("10.0.0.0", "10.0.0.255")}},
		{"0.0.0.0/0", []string{"0.0.0.0/1"}, []AddrRange{r("128.0.0.0", "255.255.255.255")}},
		{"::/0", []string{"8000::/1"}, []AddrRange{r("::", "7fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff")}},
	} {
		var ex []netip.Prefix
		for _, e := range tt.excepts {
			ex = append(ex, netip.MustParsePrefix(e))
		}
		got := subtract(netip.MustParsePrefix(tt.cidr), ex)
		if fmt.Sprint(got) != fmt.Sprint(tt.want) {
			t.Errorf("%s except %v = %v, want %v", tt.cidr, tt.excepts, got, tt.want)
		}
	}
}

// TestUpdateFilter: an update that changes nothing the compiler reads
// (after the transforms) signals nothing; one that does, signals.
func TestUpdateFilter(t *testing.T) {
	base := withPort(withIPs(mkPod("a", "p", "n1", map[string]string{"app": "x"}), "10.0.0.1"), "http", corev1.ProtocolTCP, 80)
	base.ResourceVersion = "1"
	strip := func(p *corev1.Pod) *Pod { o, _ := StripPod(p); return o.(*Pod) }
	for _, tt := range []struct {
		name   string
		change func(p *corev1.Pod)
		signal bool
	}{
		{"a condition", func(p *corev1.Pod) {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}
		}, false},
		{"an annotation", func(p *corev1.Pod) { p.Annotations = map[string]string{"a": "b"} }, false},
		{"a label", func(p *corev1.Pod) { p.Labels = map[string]string{"app": "y"} }, true},
		{"an address", func(p *corev1.Pod) { p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: "fd00::1"}) }, true},
		{"a named port", func(p *corev1.Pod) { p.Spec.Containers[0].Ports[0].ContainerPort = 81 }, true},
		{"the phase", func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }, true},
	} {
		cur := base.DeepCopy()
		cur.ResourceVersion = "2"
		tt.change(cur)
		c := &Controller{changed: make(chan struct{}, 1)}
		c.updated(strip(base), strip(cur))
		if got := len(c.changed) == 1; got != tt.signal {
			t.Errorf("%s: signal=%v, want %v", tt.name, got, tt.signal)
		}
	}
	n1, n2 := ns("a", "x", "1"), ns("a", "x", "1")
	n2.Annotations = map[string]string{"k": "v"}
	c := &Controller{changed: make(chan struct{}, 1)}
	c.updated(n1, n2)
	want(t, len(c.changed), 0)
	n2.Labels["x"] = "2"
	c.updated(n1, n2)
	want(t, len(c.changed), 1)
}

// TestStripPod: the transform keeps what the compiler reads (named
// ports of containers and init containers, addresses, labels, node,
// phase), nothing else, and copies deeply.
func TestStripPod(t *testing.T) {
	p := withPort(withIPs(mkPod("a", "p", "n1", map[string]string{"app": "x"}), "10.0.0.1", "fd00::1"), "http", corev1.ProtocolTCP, 80)
	p.Annotations = map[string]string{"big": strings.Repeat("x", 1000)}
	p.Spec.Containers[0].Image = "img"
	p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: 9})
	p.Spec.InitContainers = []corev1.Container{{Name: "side", Ports: []corev1.ContainerPort{{Name: "admin", ContainerPort: 9090}}}}
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady}}
	o, _ := StripPod(p)
	s := o.(*Pod)
	want(t, fmt.Sprintf("%s/%s %v %s %s %v %v", s.Namespace, s.Name, s.Labels, s.NodeName, s.Phase, s.IPs, s.Ports),
		`a/p map[app:x] n1 Running [10.0.0.1 fd00::1] [{admin 0 9090  } {http 0 80 TCP }]`)
	if s.Annotations != nil {
		t.Errorf("kept the annotations")
	}
	c := s.DeepCopyObject().(*Pod)
	c.Labels["app"], c.IPs[0] = "y", "10.0.0.2"
	if s.Labels["app"] != "x" || s.IPs[0] != "10.0.0.1" {
		t.Errorf("DeepCopyObject shares with the original")
	}
	rs := Compile(Input{Node: "n1", Pods: []*Pod{s}, Namespaces: []*corev1.Namespace{ns("a")}, Policies: []*networkingv1.NetworkPolicy{
		policy("a", "np", nil, nil, []networkingv1.NetworkPolicyIngressRule{{Ports: []networkingv1.NetworkPolicyPort{policyNamedPort("http"), policyNamedPort("admin")}}}, nil)}})
	if !strings.Contains(rs.String(), "10.0.0.1 . tcp . 9090") || !strings.Contains(rs.String(), "10.0.0.1 . tcp . 80") {
		t.Errorf("named ports not compiled:\n%s", rs)
	}
}

// fakeCounters is a CounterReader.
type fakeCounters map[string]uint64

func (f fakeCounters) Counters() (map[string]uint64, error) { return f, nil }

// TestVerdicts: the exported counters add up across table rewrites,
// which start the table's counters from zero under new names.
func TestVerdicts(t *testing.T) {
	cur := fakeCounters{}
	v := &verdicts{read: cur, log: slog.New(slog.DiscardHandler), names: map[string]verdictKey{}, base: map[verdictKey]uint64{}}
	reg := prometheus.NewRegistry()
	reg.MustRegister(v)
	rs := func(names ...string) *Ruleset {
		r := &Ruleset{}
		for _, n := range names {
			r.Counters = append(r.Counters, Counter{Name: n, Dir: Ingress, Verdict: Accept, Policies: []string{"db/allow"}})
		}
		r.Counters = append(r.Counters, Counter{Name: "drop-" + names[0], Dir: Egress, Verdict: Drop, Policies: []string{"web/a", "web/b"}})
		return r
	}
	v.adopt(rs("c1"))
	cur["c1"], cur["drop-c1"] = 5, 2
	check := func(allowed, dropped float64) {
		t.Helper()
		exp := fmt.Sprintf(`
# HELP bridgehead_netpol_verdicts_total %s
# TYPE bridgehead_netpol_verdicts_total counter
bridgehead_netpol_verdicts_total{direction="egress",policy="web/a,web/b",verdict="dropped"} %v
bridgehead_netpol_verdicts_total{direction="ingress",policy="db/allow",verdict="allowed"} %v
`, "Packets decided by a network policy rule (the first packets of new connections): allowed by a policy, or dropped because the pod is isolated by the policies named and none allowed them.", dropped, allowed)
		if err := testutil.GatherAndCompare(reg, strings.NewReader(exp), "bridgehead_netpol_verdicts_total"); err != nil {
			t.Error(err)
		}
	}
	check(5, 2)
	// A rewrite: counted so far folds into the base; the new table's
	// counters (other names, same labels) start at zero.
	v.fold()
	clear(cur)
	v.adopt(rs("c2"))
	cur["c2"] = 3
	check(8, 2)
}

// TestCheckBridge: the br_netfilter sysctls read into the gauge, and a
// missing or zero one is reported.
func TestCheckBridge(t *testing.T) {
	dir := t.TempDir()
	m, err := newMetrics(prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var logs strings.Builder
	c := &Controller{o: Options{ProcSys: dir}, m: m, log: slog.New(slog.NewTextHandler(&logs, nil))}
	c.checkBridge()
	want(t, testutil.ToFloat64(m.bridge.WithLabelValues("ipv4")), 0.0)
	if !strings.Contains(logs.String(), "br_netfilter is not loaded") {
		t.Errorf("log: %s", logs.String())
	}
	if err := os.MkdirAll(filepath.Join(dir, "net", "bridge"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "net", "bridge", "bridge-nf-call-iptables"), []byte("1\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "net", "bridge", "bridge-nf-call-ip6tables"), []byte("0\n"), 0o644)
	logs.Reset()
	c.checkBridge()
	want(t, testutil.ToFloat64(m.bridge.WithLabelValues("ipv4")), 1.0)
	want(t, testutil.ToFloat64(m.bridge.WithLabelValues("ipv6")), 0.0)
	if !strings.Contains(logs.String(), "again") || strings.Contains(logs.String(), "ip6tables is not 1") {
		t.Errorf("log: %s (want ipv4 back, ipv6 not repeated)", logs.String())
	}
}
