package lpm

import "net/netip"

// All calls yield for every route in the table, IPv4 before IPv6, each
// family in ascending order of address and then prefix length (the order of
// netip.Prefix.Compare), stopping early if yield returns false. It is meant
// for range-over-func:
//
//	for p, v := range t.All { ... }
//
// All only reads the table and may run concurrently with lookups, but not
// with Insert; yield must not call Insert on the same table.
func (t *Table[V]) All(yield func(netip.Prefix, V) bool) {
	if t.v4 != nil {
		w := walker[V]{yield: yield, is4: true}
		if !w.node(t.v4, 0, 1) {
			return
		}
	}
	if t.v6 != nil {
		w := walker[V]{yield: yield}
		w.node(t.v6, 0, 1)
	}
}

// walker visits a subtree in pre-order of the implicit binary trie, which
// is ascending (address, length) order.
type walker[V any] struct {
	yield func(netip.Prefix, V) bool
	key   [16]byte // address bits of the current position
	is4   bool
}

// node visits prefix index i of n (at the given depth) and everything
// below it; it returns false once yield asked to stop.
func (w *walker[V]) node(n *node[V], depth int, i uint) bool {
	if n.pfx == nil && i < 4 {
		// No prefixes here: the pre-order is just the slots in octet
		// order (indexes 2 and 3 split them into halves, 1 is the root).
		lo, hi := 0, 256
		switch i {
		case 2:
			hi = 128
		case 3:
			lo = 128
		}
		for o := lo; o < hi; o++ {
			if !w.slot(n, depth, uint8(o)) {
				return false
			}
		}
		return true
	}
	if n.hasPrefix(i) {
		level := indexLevel(i)
		// The top level bits of this octet are the low bits of i.
		k := w.key
		k[depth] = uint8((i - 1<<uint(level)) << (8 - uint(level)))
		if !w.yield(w.prefix(k, 8*depth+level), n.value(i)) {
			return false
		}
	}
	if i < 256 {
		return w.node(n, depth, 2*i) && w.node(n, depth, 2*i+1)
	}
	return w.slot(n, depth, uint8(i-256))
}

// slot visits the child slot of n for octet o.
func (w *walker[V]) slot(n *node[V], depth int, o uint8) bool {
	s := n.child(o)
	if s == nil {
		return true
	}
	if s.next == nil {
		return w.yield(s.prefix(w.is4), s.val)
	}
	saved := w.key[depth]
	w.key[depth] = o
	ok := w.node(s.next, depth+1, 2) && w.node(s.next, depth+1, 3)
	w.key[depth] = saved
	return ok
}

func (w *walker[V]) prefix(k [16]byte, plen int) netip.Prefix {
	if w.is4 {
		return netip.PrefixFrom(netip.AddrFrom4([4]byte(k[:4])), plen)
	}
	return netip.PrefixFrom(netip.AddrFrom16(k), plen)
}
