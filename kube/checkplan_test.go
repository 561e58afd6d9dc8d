package kube

import (
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestCheckPlan: problems of resources held in memory name the object,
// its field and the Site they belong to.
func TestCheckPlan(t *testing.T) {
	load := func(t *testing.T) *Resources {
		c, err := config.Load("testdata/catalog.yaml")
		if err != nil {
			t.Fatal(err)
		}
		r, err := FromConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	if c, probs, _ := CheckPlan(load(t)); len(probs) > 0 || c == nil || len(c.Sites[0].Nodes) != 2 {
		t.Fatalf("good plan: %v", probs)
	}
	// A hostname is not looked up: the gateways resolve it.
	r := load(t)
	r.Gateways[2].Spec.Endpoint = "gw-b1.invalid:51820"
	if c, probs, _ := CheckPlan(r); len(probs) > 0 || c.Sites[1].Gateways[0].Endpoint != "gw-b1.invalid:51820" {
		t.Fatalf("hostname endpoint: %v", probs)
	}
	for _, tc := range []struct {
		name string
		edit func(r *Resources)
		want PlanProblem
		msg  string
	}{
		{"bad key", func(r *Resources) { r.Gateways[2].Spec.PublicKey = "nope" },
			PlanProblem{Site: "b", Kind: "Gateway", Name: "b.gw-b1", Field: "spec.publicKey"}, "nope"},
		{"overlap", func(r *Resources) { r.Sites[1].Spec.PodCIDRs[0] = "10.244.128.0/17" },
			PlanProblem{Site: "b", Kind: "Site", Name: "b", Field: "spec.podCIDRs[0]"}, "Site a: spec.podCIDRs[0]"},
		{"gateway outside", func(r *Resources) { r.Gateways[0].Spec.Address = "10.9.0.1" },
			PlanProblem{Site: "a", Kind: "Gateway", Name: "a.gw-a1", Field: "spec.address"}, "not inside the nodeCIDRs"},
		{"node outside", func(r *Resources) { r.Nodes[1].Spec.PodCIDRs = []string{"10.245.9.0/24"} },
			PlanProblem{Site: "a", Kind: "Node", Name: "a-node2", Field: "spec.podCIDRs"}, "10.245.9.0/24"},
		{"unparsable", func(r *Resources) { r.Gateways[1].Spec.Address6 = "x" },
			PlanProblem{Site: "a", Kind: "Gateway", Name: "a.gw-a2", Field: "spec.address6"}, `"x" is not an IP address`},
		{"bad endpoint", func(r *Resources) { r.Gateways[2].Spec.Endpoint = "bad host:1" },
			PlanProblem{Site: "b", Kind: "Gateway", Name: "b.gw-b1", Field: "spec.endpoint"}, "bad host"},
		{"no gateways", func(r *Resources) { r.Gateways = nil },
			PlanProblem{Site: "a", Kind: "Site", Name: "a"}, "no Gateway"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := load(t)
			tc.edit(r)
			c, probs, _ := CheckPlan(r)
			if len(probs) == 0 || c != nil {
				t.Fatalf("no problem, or a catalog with problems")
			}
			got := probs[0]
			msg := got.Msg
			got.Msg = ""
			if got != tc.want || !strings.Contains(msg, tc.msg) {
				t.Fatalf("got %+v %q, want %+v with %q (all: %v)", got, msg, tc.want, tc.msg, probs)
			}
		})
	}
}
