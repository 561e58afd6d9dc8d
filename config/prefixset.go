package config

import (
	"net/netip"
	"slices"
)

// The address-plan checks run on catalogs of a hundred thousand prefixes
// and more, so none of them compares every prefix with every other: they
// sort and sweep (overlaps) or look up in a prefixIndex (containment),
// O(n log n) in all. Each primitive step adds to reporter.ops, which a
// test reads to catch a rule going quadratic without timing it.

// prefixIndex answers "which listed prefix contains this address (or
// this prefix)?" with one map probe per distinct prefix length in the
// list: at most 33 for IPv4 and 129 for IPv6, whatever the list's size.
// Build it once per list; it is read-only afterwards.
type prefixIndex[T any] struct {
	byPrefix map[netip.Prefix]T
	lens4    []int // distinct lengths of IPv4 prefixes, ascending
	lens6    []int
}

// newPrefixIndex indexes items by key(item). Invalid prefixes are left
// out; of several items with the same masked prefix the first is kept.
func newPrefixIndex[T any](items []T, key func(T) netip.Prefix, r *reporter) *prefixIndex[T] {
	x := &prefixIndex[T]{byPrefix: make(map[netip.Prefix]T, len(items))}
	var seen4 [33]bool
	var seen6 [129]bool
	for _, it := range items {
		r.ops++
		p := key(it)
		if !p.IsValid() {
			continue
		}
		p = p.Masked()
		if _, dup := x.byPrefix[p]; !dup {
			x.byPrefix[p] = it
		}
		if p.Addr().Is4() {
			seen4[p.Bits()] = true
		} else {
			seen6[p.Bits()] = true
		}
	}
	for l, ok := range seen4 {
		if ok {
			x.lens4 = append(x.lens4, l)
		}
	}
	for l, ok := range seen6 {
		if ok {
			x.lens6 = append(x.lens6, l)
		}
	}
	return x
}

// covering calls fn with every indexed item whose prefix contains q
// (a prefix of the same family, at most as long), shortest first.
func (x *prefixIndex[T]) covering(q netip.Prefix, r *reporter, fn func(T)) {
	if x == nil || !q.IsValid() {
		return
	}
	lens := x.lens6
	if q.Addr().Is4() {
		lens = x.lens4
	}
	for _, l := range lens {
		if l > q.Bits() {
			break
		}
		r.ops++
		p, err := q.Addr().Prefix(l)
		if err != nil {
			continue
		}
		if it, ok := x.byPrefix[p]; ok {
			fn(it)
		}
	}
}

// containsAddr reports whether an indexed prefix contains a.
func (x *prefixIndex[T]) containsAddr(a netip.Addr, r *reporter) bool {
	if !a.IsValid() {
		return false
	}
	return x.containsPrefix(netip.PrefixFrom(a, a.BitLen()), r)
}

// containsPrefix reports whether an indexed prefix contains all of q.
func (x *prefixIndex[T]) containsPrefix(q netip.Prefix, r *reporter) bool {
	found := false
	x.covering(q, r, func(T) { found = true })
	return found
}

// sweepOverlaps finds the overlapping pairs among items in O(n log n):
// sorted by start address and then length, two CIDRs overlap only when
// one contains the other, and the prefixes containing the current one
// form a chain (at most 129 long) kept on a stack. fn is called with each
// pair (earlier, later) in list order: the first listings of every two
// different overlapping prefixes, and each repeated listing of a prefix
// with its first listing only, so the number of calls stays linear
// however the list is shaped.
func sweepOverlaps(items []cidr, r *reporter, fn func(earlier, later cidr)) {
	type entry struct {
		c     cidr
		order int // index in items
	}
	sorted := make([]entry, 0, len(items))
	for i, it := range items {
		if it.p.IsValid() {
			it.p = it.p.Masked()
			sorted = append(sorted, entry{it, i})
		}
	}
	slices.SortFunc(sorted, func(a, b entry) int {
		r.ops++
		if c := a.c.p.Addr().Compare(b.c.p.Addr()); c != 0 {
			return c
		}
		if c := a.c.p.Bits() - b.c.p.Bits(); c != 0 {
			return c
		}
		return a.order - b.order
	})
	report := func(a, b entry) {
		if a.order < b.order {
			fn(items[a.order], items[b.order])
		} else {
			fn(items[b.order], items[a.order])
		}
	}
	var stack []entry // each contains the next; the first listing of each prefix
	for _, e := range sorted {
		for len(stack) > 0 {
			r.ops++
			if top := stack[len(stack)-1].c.p; top.Addr().BitLen() == e.c.p.Addr().BitLen() && top.Contains(e.c.p.Addr()) {
				break
			}
			stack = stack[:len(stack)-1]
		}
		if len(stack) > 0 && stack[len(stack)-1].c.p == e.c.p {
			report(stack[len(stack)-1], e) // a repeated listing
			continue
		}
		for _, a := range stack {
			r.ops++
			report(a, e)
		}
		stack = append(stack, e)
	}
}
