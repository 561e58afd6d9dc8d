package lpm

import (
	"encoding/binary"
	"net/netip"
)

// Table maps IP prefixes to values and answers longest-prefix-match
// queries. IPv4 and IPv6 routes live under separate roots.
//
// The zero value is an empty table ready to use. Build a Table with Insert
// from a single goroutine, then share it read-only: Lookup, LookupPrefix,
// Len and All are safe for any number of concurrent readers as long as no
// Insert runs at the same time. To change routes, build a new Table and
// publish it atomically (for example with atomic.Pointer) rather than
// mutating one that readers can see. A Table must not be copied after the
// first Insert.
type Table[V any] struct {
	v4, v6 *node[V]
	n      int
}

// normalize masks p and turns an IPv4-mapped IPv6 prefix of at least 96
// bits into the equivalent IPv4 prefix, since lookups of IPv4-mapped
// addresses are answered from the IPv4 routes. It reports false for an
// invalid prefix.
func normalize(p netip.Prefix) (netip.Prefix, bool) {
	if !p.IsValid() {
		return netip.Prefix{}, false
	}
	p = p.Masked()
	if a := p.Addr(); a.Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(a.Unmap(), p.Bits()-96)
	}
	return p, p.IsValid()
}

// Insert adds the route p with value v, replacing the value of an equal
// prefix. The prefix is masked first (10.1.2.3/8 is 10.0.0.0/8), and an
// IPv4-mapped IPv6 prefix of /96 or longer is stored as the equivalent IPv4
// prefix. An invalid prefix is ignored. Insert must not run concurrently
// with any other method.
func (t *Table[V]) Insert(p netip.Prefix, v V) {
	p, ok := normalize(p)
	if !ok {
		return
	}
	root := &t.v4
	if p.Addr().Is6() {
		root = &t.v6
	}
	if *root == nil {
		*root = &node[V]{}
	}
	key := keyOf(p.Addr())
	if (*root).insert(&key, p.Bits(), 0, v) {
		t.n++
	}
}

// Len returns the number of distinct routes in the table.
func (t *Table[V]) Len() int { return t.n }

// Lookup returns the value of the longest prefix containing a. An
// IPv4-mapped IPv6 address is looked up as IPv4 and an IPv6 zone is
// ignored. It does not allocate.
func (t *Table[V]) Lookup(a netip.Addr) (v V, ok bool) {
	v, _, ok = t.find(&a)
	return v, ok
}

// LookupPrefix is Lookup that also returns the matched prefix. It does not
// allocate.
func (t *Table[V]) LookupPrefix(a netip.Addr) (p netip.Prefix, v V, ok bool) {
	v, plen, ok := t.find(&a)
	if !ok {
		return netip.Prefix{}, v, false
	}
	p, _ = a.Prefix(plen)
	return p, v, true
}

// find performs the lookup, unmapping *a in place,
// and returns the value and length of the longest matching prefix.
func (t *Table[V]) find(a *netip.Addr) (v V, plen int, ok bool) {
	var root *node[V]
	var maxDepth int
	switch *a = a.Unmap(); {
	case a.Is4():
		root, maxDepth = t.v4, 4
	case a.Is6():
		root, maxDepth = t.v6, 16
	}
	if root == nil {
		return v, 0, false
	}
	key := keyOf(*a)
	hi, lo := binary.BigEndian.Uint64(key[:8]), binary.BigEndian.Uint64(key[8:])

	// Walk down as far as the address leads, remembering the nodes, then
	// take the deepest node with a matching prefix: deeper means longer.
	var path [16]*node[V]
	n, depth := root, 0
	// Nodes of the last octet never have slots (full-length routes end
	// inside them), so the walk stops there at the latest.
	for {
		path[depth] = n
		if depth+1 >= maxDepth {
			break
		}
		s := n.child(key[depth])
		if s == nil {
			break
		}
		if s.next == nil {
			if s.contains(hi, lo) {
				return s.val, int(s.plen), true
			}
			break
		}
		n = s.next
		depth++
	}
	for ; depth >= 0; depth-- {
		n := path[depth]
		if i, found := n.longest(key[depth]); found {
			return n.value(i), 8*depth + indexLevel(i), true
		}
	}
	return v, 0, false
}
