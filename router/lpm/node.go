package lpm

import (
	"encoding/binary"
	"math/bits"
	"net/netip"
	"slices"
)

// A node covers one octet (stride) of the address. Prefixes that end inside
// the octet are numbered like the nodes of a complete binary tree (the
// allotment routing table indexing): a prefix of level l (0..8 bits of this
// octet) whose top bits are b has index 1<<l + b. Index 1 (level 0) is only
// used by the root, for the default route; every deeper node stores levels
// 1..8, so a node at depth d holds prefix lengths 8d+1 through 8d+8.
//
// Routes longer than the node's octet live below a child slot keyed by the
// octet value. A slot holds a deeper node, or, while it is the only route
// below that slot, a leaf carrying the full prefix (path compression), so
// long, sparse routes do not create a chain of mostly empty nodes.
//
// The part a lookup reads on its way down (the slot bitmap and slice) is
// kept to 64 bytes, one cache line; the prefixes, read only when the walk
// backs up to find the longest match, sit behind a pointer.
type node[V any] struct {
	slots bitset256     // which octet values have a child slot
	kids  []slot[V]     // one per set bit of slots, in octet order
	pfx   *prefixSet[V] // routes ending inside this octet, or nil
}

// prefixSet holds the routes that end inside a node's octet.
type prefixSet[V any] struct {
	present bitset512 // which prefix indexes (1..511) are present
	values  []V       // one per set bit of present, in index order
}

// slot is a child position: either next is set (a deeper node) or the slot
// is a leaf holding a single route: the address bits hi and lo (an IPv4
// address in the top 32 bits of hi), its length plen and its value. The
// leaf is stored this compactly, rather than as a netip.Prefix, because
// slots are most of a large table's memory and of a lookup's cache misses.
type slot[V any] struct {
	next   *node[V]
	hi, lo uint64
	val    V
	plen   uint8
}

// contains reports whether the leaf route covers the address hi, lo.
func (s *slot[V]) contains(hi, lo uint64) bool {
	p := uint(s.plen)
	mhi := ^uint64(0) << (64 - min(p, 64)) // shifts of 64 give 0
	mlo := ^uint64(0) << (128 - max(p, 64))
	return (hi^s.hi)&mhi|(lo^s.lo)&mlo == 0
}

// prefix returns the leaf route as a netip.Prefix.
func (s *slot[V]) prefix(is4 bool) netip.Prefix {
	return netip.PrefixFrom(keyAddr(s.hi, s.lo, is4), int(s.plen))
}

type bitset512 [8]uint64

func (s *bitset512) has(i uint) bool { return s[i>>6&7]&(1<<(i&63)) != 0 }
func (s *bitset512) set(i uint)      { s[i>>6&7] |= 1 << (i & 63) }

// rank is the number of set bits strictly below i.
func (s *bitset512) rank(i uint) int {
	w := i >> 6 & 7
	n := bits.OnesCount64(s[w] & (1<<(i&63) - 1))
	for j := uint(0); j < w; j++ {
		n += bits.OnesCount64(s[j])
	}
	return n
}

type bitset256 [4]uint64

func (s *bitset256) has(i uint8) bool { return s[i>>6]&(1<<(i&63)) != 0 }
func (s *bitset256) set(i uint8)      { s[i>>6] |= 1 << (i & 63) }

// rank is the number of set bits strictly below i.
func (s *bitset256) rank(i uint8) int {
	w := i >> 6
	n := bits.OnesCount64(s[w] & (1<<(i&63) - 1))
	for j := uint8(0); j < w; j++ {
		n += bits.OnesCount64(s[j])
	}
	return n
}

// prefixIndex numbers the prefix made of the top level bits of octet o.
func prefixIndex(o uint8, level int) uint {
	return 1<<uint(level) + uint(o)>>(8-uint(level))
}

// indexLevel is the inverse of prefixIndex for the level: how many bits of
// the node's octet the prefix at index i covers.
func indexLevel(i uint) int { return bits.Len(i) - 1 }

// longest returns the index of the longest prefix in n that contains octet
// o, walking from the eight-bit prefix up towards the root of the node.
func (n *node[V]) longest(o uint8) (uint, bool) {
	ps := n.pfx
	if ps == nil {
		return 0, false
	}
	// Gather presence of the nine candidates (levels 8 down to 0) into a
	// mask without branching, then pick the longest.
	i := 256 + uint(o)
	var m uint
	for l := uint(0); l < 9; l++ {
		j := i >> l
		m |= uint(ps.present[j>>6&7]>>(j&63)&1) << l
	}
	if m == 0 {
		return 0, false
	}
	return i >> uint(bits.TrailingZeros(m)), true
}

// value returns the value stored for the present prefix index i.
func (n *node[V]) value(i uint) V { return n.pfx.values[n.pfx.present.rank(i)] }

// hasPrefix reports whether prefix index i is present.
func (n *node[V]) hasPrefix(i uint) bool { return n.pfx != nil && n.pfx.present.has(i) }

// child returns the slot for octet o, or nil.
func (n *node[V]) child(o uint8) *slot[V] {
	if !n.slots.has(o) {
		return nil
	}
	return &n.kids[n.slots.rank(o)]
}

// setPrefix stores v at index i and reports whether i was new.
func (n *node[V]) setPrefix(i uint, v V) bool {
	if n.pfx == nil {
		n.pfx = &prefixSet[V]{}
	}
	ps := n.pfx
	r := ps.present.rank(i)
	if ps.present.has(i) {
		ps.values[r] = v
		return false
	}
	ps.present.set(i)
	ps.values = slices.Insert(ps.values, r, v) // amortized, as in addSlot
	return true
}

// addSlot inserts a new slot for octet o, which must not be present.
func (n *node[V]) addSlot(o uint8, s slot[V]) {
	r := n.slots.rank(o)
	n.slots.set(o)
	// Grow as append does. Growing to the exact size on every insert
	// copied the whole array each time: building a node of 256 children
	// copied 33k slots, and a catalog of 100k prefixes allocated 283 MB
	// per build (every reload). The slack sits after the last child, so
	// a lookup's rank-indexed read touches the same cache lines.
	n.kids = slices.Insert(n.kids, r, s)
}

// insert adds the route of plen bits whose address bytes are key to the
// subtree of n, which sits at the given depth in octets. It reports whether
// the route was new rather than a replacement.
func (n *node[V]) insert(key *[16]byte, plen, depth int, v V) bool {
	hi, lo := binary.BigEndian.Uint64(key[:8]), binary.BigEndian.Uint64(key[8:])
	for {
		if plen <= 8*depth+8 {
			return n.setPrefix(prefixIndex(key[depth], plen-8*depth), v)
		}
		o := key[depth]
		s := n.child(o)
		switch {
		case s == nil:
			n.addSlot(o, slot[V]{hi: hi, lo: lo, plen: uint8(plen), val: v})
			return true
		case s.next != nil:
			n = s.next
			depth++
		case s.hi == hi && s.lo == lo && int(s.plen) == plen:
			s.val = v
			return false
		default:
			// Two routes now share this slot: push the leaf one level
			// down into a new node and continue with the new route there.
			down := &node[V]{}
			var oldKey [16]byte
			binary.BigEndian.PutUint64(oldKey[:8], s.hi)
			binary.BigEndian.PutUint64(oldKey[8:], s.lo)
			down.insert(&oldKey, int(s.plen), depth+1, s.val)
			*s = slot[V]{next: down}
			n = down
			depth++
		}
	}
}

// keyOf returns the address bytes, IPv4 in the first four.
func keyOf(a netip.Addr) [16]byte {
	if a.Is4() {
		var k [16]byte
		b := a.As4()
		copy(k[:], b[:])
		return k
	}
	return a.As16()
}

// keyAddr is the inverse of keyOf on the key as two big-endian words.
func keyAddr(hi, lo uint64, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte{byte(hi >> 56), byte(hi >> 48), byte(hi >> 40), byte(hi >> 32)})
	}
	var k [16]byte
	binary.BigEndian.PutUint64(k[:8], hi)
	binary.BigEndian.PutUint64(k[8:], lo)
	return netip.AddrFrom16(k)
}
