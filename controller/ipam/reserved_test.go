package ipam

import (
	"fmt"
	"testing"
)

// TestEvictedBlockStaysReserved: a node whose block leaves the pool (a
// pod CIDR removed, the block size changed, the site removed) keeps it:
// Lookup still returns it, and when the pool holds it again nobody else
// is given it. Its pods still use those addresses.
func TestEvictedBlockStaysReserved(t *testing.T) {
	orig := Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24", "10.0.8.0/24"), BlockBits4: 24}
	for _, tc := range []struct {
		name  string
		leave func(a *Allocator) []string // takes n1's block 10.0.8.0/24 out of the pool
	}{
		{"pod CIDR removed", func(a *Allocator) []string {
			ev, err := a.SetSite(Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24"), BlockBits4: 24})
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}},
		{"block size changed", func(a *Allocator) []string {
			ev, err := a.SetSite(Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24", "10.0.8.0/24"), BlockBits4: 25})
			if err != nil {
				t.Fatal(err)
			}
			return ev
		}},
		{"site removed", func(a *Allocator) []string { return a.RemoveSite("s") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := New(Options{})
			mustSet(t, a, orig)
			if b, err := a.Allocate("s", "n0"); err != nil || fmtList(b) != "[10.0.0.0/24]" {
				t.Fatalf("n0: %v %v", b, err)
			}
			if b, err := a.Allocate("s", "n1"); err != nil || fmtList(b) != "[10.0.8.0/24]" {
				t.Fatalf("n1: %v %v", b, err)
			}
			ev := tc.leave(a)
			if fmt.Sprint(ev) != "[n1]" && fmt.Sprint(ev) != "[n0 n1]" {
				t.Errorf("reported %v, want n1 among them", ev)
			}
			if b, _, ok := a.Lookup("n1"); !ok || fmtList(b) != "[10.0.8.0/24]" {
				t.Errorf("n1 holds %v %v after its block left the pool, want [10.0.8.0/24]", b, ok)
			}
			checkInvariants(t, a)
			// The pool comes back: 10.0.8.0/24 is still n1's.
			mustSet(t, a, orig)
			if b, _, ok := a.Lookup("n1"); !ok || fmtList(b) != "[10.0.8.0/24]" {
				t.Errorf("n1 holds %v %v after the pool came back", b, ok)
			}
			for i := range 4 {
				b, err := a.Allocate("s", fmt.Sprintf("other%d", i))
				if err != nil {
					break
				}
				if fmtList(b) == "[10.0.8.0/24]" {
					t.Fatalf("other%d was given n1's block 10.0.8.0/24", i)
				}
			}
			checkInvariants(t, a)
		})
	}
}
