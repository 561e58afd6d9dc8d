package controller

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// testKey is a valid public key derived from seed.
func testKey(seed string) string {
	s := sha256.Sum256([]byte(seed))
	k, err := ecdh.X25519().NewPrivateKey(s[:])
	if err != nil {
		panic(err)
	}
	return base64.StdEncoding.EncodeToString(k.PublicKey().Bytes())
}

func testGateway(site, name, addr, endpoint, key string) *v1alpha1.Gateway {
	return &v1alpha1.Gateway{ObjectMeta: metav1.ObjectMeta{Name: site + "." + name},
		Spec: v1alpha1.GatewaySpec{Site: site, Address: v1alpha1.IP(addr), Endpoint: endpoint, PublicKey: key}}
}

func testNode(name, site, ip, blocks string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{LabelSite: site},
		Annotations: map[string]string{AnnotationPodCIDRs: blocks}}}
	n.Status.Addresses = []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip}, {Type: corev1.NodeInternalIP, Address: "10.99.99.99"}}
	return n
}

func TestBuildPlan(t *testing.T) {
	sites := func() []*v1alpha1.Site {
		return []*v1alpha1.Site{
			testSite("b", []v1alpha1.CIDR{"10.2.0.0/16"}, []v1alpha1.CIDR{"10.102.0.0/16"}),
			testSite("a", []v1alpha1.CIDR{"10.1.0.0/16"}, []v1alpha1.CIDR{"10.101.0.0/16"}),
		}
	}
	gws := func() []*v1alpha1.Gateway {
		return []*v1alpha1.Gateway{
			testGateway("a", "gw1", "10.1.0.1", "192.0.2.1:51820", testKey("a1")),
			testGateway("b", "gw1", "10.2.0.1", "192.0.2.2:51820", testKey("b1")),
		}
	}
	nodes := func() []*corev1.Node {
		return []*corev1.Node{
			testNode("a-2", "a", "10.1.1.2", "10.101.2.0/24"),
			testNode("a-1", "a", "10.1.1.1", "10.101.1.0/24"),
			testNode("b-1", "b", "10.2.1.1", "10.102.1.0/24"),
			{ObjectMeta: metav1.ObjectMeta{Name: "unallocated", Labels: map[string]string{LabelSite: "a"}}},
		}
	}
	for _, tc := range []struct {
		name      string
		edit      func(s []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node)
		invalid   map[string]string
		published string // site:nodes,...
		leftOut   map[string]string
		nodeProbs map[string]string
		notes     map[string]string
	}{
		{name: "good", published: "a:a-1,a-2 b:b-1"},
		{name: "bad key", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			g[1].Spec.PublicKey = "AAAA"
			return g, n
		}, published: "a:a-1,a-2", leftOut: map[string]string{"b": "Gateway b.gw1: spec.publicKey:"}},
		{name: "registered in status", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			g[1].Status.PublicKey, g[1].Spec.PublicKey = g[1].Spec.PublicKey, ""
			g[1].Status.Endpoint, g[1].Spec.Endpoint = g[1].Spec.Endpoint, ""
			return g, n
		}, published: "a:a-1,a-2 b:b-1"},
		{name: "not registered yet", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			g[1].Spec.PublicKey = ""
			return g, n
		}, published: "a:a-1,a-2", leftOut: map[string]string{"b": `site "b" has no gateways`}},
		{name: "behind NAT, reached through a hub", edit: func(s []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			s[0].Spec.Via = []string{"a"}
			g[1].Spec.Endpoint, g[1].Spec.BehindNAT = "", true
			g[1].Status.Endpoint = "198.51.100.7:4000" // what a NATed gateway might register: ignored
			return g, n
		}, published: "a:a-1,a-2 b:b-1"},
		{name: "behind NAT, not registered yet", edit: func(s []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			g[1].Spec.Endpoint, g[1].Spec.BehindNAT, g[1].Spec.PublicKey = "", true, ""
			return g, n
		}, published: "a:a-1,a-2", leftOut: map[string]string{"b": `site "b" has no gateways`}},
		{name: "no gateways at all", edit: func(_ []*v1alpha1.Site, _ []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			return nil, n
		}, published: "", leftOut: map[string]string{"a": "no Gateway", "b": "no Gateway"}},
		{name: "invalid spec", invalid: map[string]string{"a": "spec.podCIDRs[0]: host bits set"},
			published: "b:b-1", leftOut: map[string]string{"a": "host bits set"}},
		{name: "reserved range", edit: func(s []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			s[0].Spec.PodCIDRs = []v1alpha1.CIDR{"169.254.0.0/16"}
			return g, n
		}, published: "a:a-1,a-2", leftOut: map[string]string{"b": "Site b: spec.podCIDRs[0]"}},
		{name: "node outside the pool", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			n[0].Annotations[AnnotationPodCIDRs] = "10.102.9.0/24"
			return g, n
		}, published: "a:a-1 b:b-1", nodeProbs: map[string]string{"a-2": "Node a-2: spec.podCIDRs"}},
		{name: "node annotation unreadable", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			n[0].Annotations[AnnotationPodCIDRs] = "nope"
			return g, n
		}, published: "a:a-1 b:b-1", nodeProbs: map[string]string{"a-2": `"nope" is not a CIDR`}},
		{name: "single-stack node of a dual-stack site", edit: func(_ []*v1alpha1.Site, g []*v1alpha1.Gateway, n []*corev1.Node) ([]*v1alpha1.Gateway, []*corev1.Node) {
			n[0].Annotations[AnnotationPodCIDRs] = "10.101.2.0/24,fd65::/80"
			return g, n
		}, published: "a:a-1,a-2 b:b-1", notes: map[string]string{"a-2": "pod block fd65::/80 left out"}},
		{name: "node of a left-out site", invalid: map[string]string{"b": "x"}, published: "a:a-1,a-2", leftOut: map[string]string{"b": "x"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, g, n := sites(), gws(), nodes()
			if tc.edit != nil {
				g, n = tc.edit(s, g, n)
			}
			p, err := buildPlan(s, g, n, tc.invalid)
			if err != nil {
				t.Fatal(err)
			}
			var got []string
			for _, site := range p.sites {
				var names []string
				for _, node := range site.Nodes {
					names = append(names, node.Name)
					if node.Address.String() == "10.99.99.99" {
						t.Errorf("node %s: second InternalIP published", node.Name)
					}
				}
				got = append(got, site.Name+":"+strings.Join(names, ","))
				if strings.HasPrefix(tc.name, "behind NAT") && site.Name == "b" && (len(site.Gateways) != 1 || site.Gateways[0].HasEndpoint()) {
					t.Errorf("site b's gateways %+v, want one without an endpoint", site.Gateways)
				}
			}
			if strings.Join(got, " ") != tc.published {
				t.Errorf("published %q, want %q", strings.Join(got, " "), tc.published)
			}
			check := func(kind string, got, want map[string]string) {
				if len(got) != len(want) {
					t.Errorf("%s left out %v, want %v", kind, got, want)
				}
				for k, w := range want {
					if !strings.Contains(got[k], w) {
						t.Errorf("%s %s: %q, want %q", kind, k, got[k], w)
					}
				}
			}
			check("sites", p.leftOut, tc.leftOut)
			check("nodes", p.nodeProblems, tc.nodeProbs)
			check("node notes", p.nodeNotes, tc.notes)
			if t.Failed() {
				t.Logf("left out %v; nodes %v", p.leftOut, p.nodeProblems)
			}
		})
	}
}

// BenchmarkBuildPlan: 10,000 nodes over 200 sites, checked and converted
// (the render of kube/catalog comes on top: BenchmarkRender there).
func BenchmarkBuildPlan(b *testing.B) {
	sites, gws, nodes := scalePlan(200, 10000)
	for b.Loop() {
		p, err := buildPlan(sites, gws, nodes, nil)
		if err != nil || len(p.leftOut) > 0 || p.nodes != 10000 {
			b.Fatalf("%v %v %d", err, p.leftOut, p.nodes)
		}
	}
}

// scalePlan is nSites valid sites with two gateways each and nNodes
// allocated dual-stack nodes spread over them: site i has node CIDRs
// 10.<i>.0.0/16 and fd00:<i>::/64, pod CIDRs 100.64.0.0/10 split in /18s
// and fd10:<i>::/64 with /80 blocks.
func scalePlan(nSites, nNodes int) ([]*v1alpha1.Site, []*v1alpha1.Gateway, []*corev1.Node) {
	var sites []*v1alpha1.Site
	var gws []*v1alpha1.Gateway
	for i := range nSites {
		name := fmt.Sprintf("site-%03d", i)
		s := testSite(name, []v1alpha1.CIDR{v1alpha1.CIDR(fmt.Sprintf("10.%d.0.0/16", i)), v1alpha1.CIDR(fmt.Sprintf("fd00:%x::/64", i))},
			[]v1alpha1.CIDR{v1alpha1.CIDR(fmt.Sprintf("100.%d.%d.0/18", 64+i/4, i%4*64)), v1alpha1.CIDR(fmt.Sprintf("fd10:%x::/64", i))})
		s.Spec.PodBlockSize6 = 80
		sites = append(sites, s)
		for j := 1; j <= 2; j++ {
			gws = append(gws, testGateway(name, fmt.Sprintf("gw%d", j), fmt.Sprintf("10.%d.0.%d", i, j),
				fmt.Sprintf("198.18.%d.%d:51820", i, j), testKey(fmt.Sprintf("%s-%d", name, j))))
		}
	}
	var nodes []*corev1.Node
	for k := range nNodes {
		i, idx := k%nSites, k/nSites
		n := testNode(fmt.Sprintf("node-%05d", k), fmt.Sprintf("site-%03d", i), fmt.Sprintf("10.%d.%d.%d", i, 1+idx/250, idx%250+1),
			fmt.Sprintf("100.%d.%d.0/24,fd10:%x::%x:0:0:0/80", 64+i/4, i%4*64+idx, i, idx))
		n.Status.Addresses = append(n.Status.Addresses[:1], corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: fmt.Sprintf("fd00:%x::%x", i, idx+10)})
		nodes = append(nodes, n)
	}
	return sites, gws, nodes
}
