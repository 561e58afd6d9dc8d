package ipam

import (
	"errors"
	"net/netip"
	"reflect"
	"testing"
	"time"
)

// TestRestoreAcrossAllocators: a second Allocator (a new leader) that
// rebuilds from the remaining nodes and restores the first one's Pending
// keeps a deleted node's block out of the pool until the first grace ends,
// not its own start plus the grace; the node coming back gets its block.
func TestRestoreAcrossAllocators(t *testing.T) {
	clk := newClock()
	site := Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24", "fd00::/120"), BlockBits4: 25, BlockBits6: 121}
	a := New(Options{Now: clk.Now, Grace: time.Minute})
	mustSet(t, a, site)
	b1, _ := a.Allocate("s", "n1")
	if _, err := a.Allocate("s", "n2"); err != nil {
		t.Fatal(err)
	}
	a.Release("n1")
	pend := a.Pending()
	want := []Released{{Node: "n1", Site: "s", CIDRs: b1.List(), Expires: clk.Now().Add(time.Minute)}}
	if !reflect.DeepEqual(pend, want) {
		t.Fatalf("Pending %+v, want %+v", pend, want)
	}

	clk.Add(40 * time.Second) // the restart
	fresh := func() *Allocator {
		b := New(Options{Now: clk.Now, Grace: time.Minute})
		mustSet(t, b, site)
		if probs := b.Rebuild(a.Holdings()); len(probs) > 0 {
			t.Fatal(probs)
		}
		return b
	}
	// Without Restore the block is free at once (what a restart did).
	if _, err := fresh().Allocate("s", "n3"); err != nil {
		t.Fatalf("control: %v", err)
	}
	b := fresh()
	if probs := b.Restore(pend); len(probs) > 0 {
		t.Fatal(probs)
	}
	checkInvariants(t, b)
	if st := b.Stats("s"); st.V4 != (FamilyStats{Blocks: 2, Held: 1, Pending: 1}) {
		t.Errorf("stats after restore %+v", st)
	}
	if at, ok := b.NextRelease(); !ok || !at.Equal(want[0].Expires) {
		t.Errorf("NextRelease %v %v, want %v", at, ok, want[0].Expires)
	}
	if _, err := b.Allocate("s", "n3"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("restored block handed out within the grace: %v", err)
	}
	if !reflect.DeepEqual(b.Pending(), pend) {
		t.Errorf("Pending after restore %+v, want %+v", b.Pending(), pend)
	}
	// Restoring twice changes nothing.
	b.Restore(pend)
	checkInvariants(t, b)
	clk.Add(20*time.Second - time.Nanosecond)
	if _, err := b.Allocate("s", "n3"); !errors.Is(err, ErrExhausted) {
		t.Fatalf("block handed out before the first grace ended: %v", err)
	}
	clk.Add(time.Nanosecond)
	if got, err := b.Allocate("s", "n3"); err != nil || got != b1 {
		t.Fatalf("after the grace: %v %v, want %v", got, err, b1)
	}
	checkInvariants(t, b)

	// The node back within the grace gets its blocks again.
	c := fresh()
	c.Restore(pend)
	if got, err := c.Allocate("s", "n1"); err != nil || got != b1 {
		t.Fatalf("n1 back: %v %v, want %v", got, err, b1)
	}
	checkInvariants(t, c)
}

func TestRestoreSkips(t *testing.T) {
	clk := newClock()
	a := New(Options{Now: clk.Now, Grace: time.Minute})
	mustSet(t, a, Site{Name: "s", PodCIDRs: prefixes("10.0.0.0/24"), BlockBits4: 26})
	held, _ := a.Allocate("s", "n2")
	later := clk.Now().Add(time.Minute)
	probs := a.Restore([]Released{
		{Node: "expired", Site: "s", CIDRs: prefixes("10.0.0.64/26"), Expires: clk.Now()},
		{Node: "n2", Site: "s", CIDRs: prefixes("10.0.0.64/26"), Expires: later},        // holds blocks: skipped
		{Node: "gone", Site: "nosuch", CIDRs: prefixes("10.0.0.64/26"), Expires: later}, // UnknownSite
		{Node: "other", Site: "s", CIDRs: []netip.Prefix{held.V4}, Expires: later},      // Conflict with n2
		{Node: "out", Site: "s", CIDRs: prefixes("10.9.0.0/26"), Expires: later},        // OutOfPool
		{Node: "ok", Site: "s", CIDRs: prefixes("10.0.0.128/26"), Expires: later.Add(-time.Second)},
		{Node: "ok2", Site: "s", CIDRs: prefixes("10.0.0.192/26"), Expires: later.Add(-2 * time.Second)},
	})
	var reasons []Reason
	for _, p := range probs {
		reasons = append(reasons, p.Reason)
	}
	if !reflect.DeepEqual(reasons, []Reason{UnknownSite, Conflict, OutOfPool}) {
		t.Errorf("problems %v", probs)
	}
	checkInvariants(t, a)
	if st := a.Stats("s"); st.V4 != (FamilyStats{Blocks: 4, Held: 1, Pending: 2, Free: 1}) {
		t.Errorf("stats %+v", st)
	}
	// Expiry order holds whatever the order restored.
	if at, _ := a.NextRelease(); !at.Equal(later.Add(-2 * time.Second)) {
		t.Errorf("NextRelease %v", at)
	}
	clk.Add(time.Minute - 2*time.Second)
	if st := a.Stats("s"); st.V4.Pending != 1 {
		t.Errorf("after the first expiry %+v", st)
	}
}
