package controller

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

func testSite(name string, nodeCIDRs, podCIDRs []v1alpha1.CIDR) *v1alpha1.Site {
	return &v1alpha1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1alpha1.SiteSpec{NodeCIDRs: nodeCIDRs, PodCIDRs: podCIDRs, PodBlockSize: 24, PodBlockSize6: 64}}
}

func TestParseSite(t *testing.T) {
	for _, tc := range []struct {
		name string
		site *v1alpha1.Site
		want string // error substring; "" = ok
	}{
		{"ok", testSite("a", []v1alpha1.CIDR{"10.1.0.0/16", "fd01::/64"}, []v1alpha1.CIDR{"10.101.0.0/16", "fd65::/56"}), ""},
		{"bad node CIDR", testSite("a", []v1alpha1.CIDR{"10.1.0.0/33"}, nil), "spec.nodeCIDRs[0]"},
		{"host bits", testSite("a", nil, []v1alpha1.CIDR{"10.101.0.1/16"}), "spec.podCIDRs[0] \"10.101.0.1/16\": host bits set (want 10.101.0.0/16)"},
		{"block too wide", &v1alpha1.Site{ObjectMeta: metav1.ObjectMeta{Name: "a"}, Spec: v1alpha1.SiteSpec{PodCIDRs: []v1alpha1.CIDR{"10.0.0.0/24"}, PodBlockSize: 16}}, "spec.podBlockSize 16"},
	} {
		_, err := parseSite(tc.site)
		if (err == nil) != (tc.want == "") || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: err %v, want %q", tc.name, err, tc.want)
		}
	}
	m, _ := parseSite(&v1alpha1.Site{ObjectMeta: metav1.ObjectMeta{Name: "d"}, Spec: v1alpha1.SiteSpec{PodCIDRs: []v1alpha1.CIDR{"10.0.0.0/16"}}})
	if m.pool.BlockBits4 != 24 || m.pool.BlockBits6 != 80 {
		t.Errorf("defaults %+v, want the CRD's 24 and 80", m.pool)
	}
}

func TestMatchAndOverlaps(t *testing.T) {
	sites := map[string]site{}
	for _, s := range []*v1alpha1.Site{
		testSite("a", []v1alpha1.CIDR{"10.1.0.0/16", "fd01::/64"}, []v1alpha1.CIDR{"10.101.0.0/16"}),
		testSite("b", []v1alpha1.CIDR{"10.2.0.0/16"}, []v1alpha1.CIDR{"10.102.0.0/16"}),
		testSite("c", []v1alpha1.CIDR{"10.2.128.0/24"}, []v1alpha1.CIDR{"10.103.0.0/16"}),
		testSite("d", []v1alpha1.CIDR{"10.4.0.0/16"}, []v1alpha1.CIDR{"10.1.5.0/24"}),
		testSite("e", []v1alpha1.CIDR{"fd05::/64"}, nil),
	} {
		m, err := parseSite(s)
		if err != nil {
			t.Fatal(err)
		}
		sites[s.Name] = m
	}
	ov := overlapProblems(sites)
	var names []string
	for n := range ov {
		names = append(names, n)
	}
	if want := []string{"a", "b", "c", "d"}; !reflect.DeepEqual(sortedCopy(names), want) {
		t.Fatalf("overlapping sites %v, want %v (%v)", sortedCopy(names), want, ov)
	}
	if !strings.Contains(ov["b"], "spec.nodeCIDRs[0] 10.2.0.0/16 overlaps spec.nodeCIDRs[0] 10.2.128.0/24 of site c") {
		t.Errorf("b: %s", ov["b"])
	}
	if !strings.Contains(ov["d"], "spec.podCIDRs[0] 10.1.5.0/24 overlaps spec.nodeCIDRs[0] 10.1.0.0/16 of site a") {
		t.Errorf("d: %s", ov["d"])
	}
	m := newMatcher(sites, map[string]string{"b": "", "c": ""})
	for _, tc := range []struct {
		ips  []string
		want []string
	}{
		{[]string{"10.1.2.3"}, []string{"a"}},
		{[]string{"fd01::9"}, []string{"a"}},
		{[]string{"10.1.2.3", "fd01::9"}, []string{"a"}},
		{[]string{"10.1.2.3", "fd05::9"}, []string{"a", "e"}},
		{[]string{"10.2.128.1"}, nil}, // b and c are excluded
		{[]string{"192.168.1.1"}, nil},
	} {
		var ips []netip.Addr
		for _, s := range tc.ips {
			ips = append(ips, netip.MustParseAddr(s))
		}
		if got := m.match(ips); !reflect.DeepEqual(got, tc.want) {
			t.Errorf("match(%v) = %v, want %v", tc.ips, got, tc.want)
		}
	}
}

func sortedCopy(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}
