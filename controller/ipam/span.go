package ipam

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"net/netip"
)

// maxIndexBits bounds the blocks in one span to 2^20 (a 128 KiB bitmap): a
// wider pod CIDR (fd00:1::/48 in /80 blocks has 2^32) uses its first 2^20
// blocks, a million nodes.
const maxIndexBits = 20

// span is one pod CIDR cut into blocks, with a bitmap of the blocks in use.
// Padding bits past n in the last word are set and not counted in used.
type span struct {
	prefix netip.Prefix
	base   u128
	shift  uint   // address bits below the block prefix
	n      uint32 // blocks in the span
	used   uint32 // blocks set (held or in their release grace)
	next   uint32 // where the next search starts (rotates, as kube's cidrset)
	words  []uint64
}

func newSpan(p netip.Prefix, blockBits int) (*span, error) {
	addrBits := p.Addr().BitLen()
	if blockBits < p.Bits() || blockBits > addrBits {
		return nil, fmt.Errorf("block size /%d does not fit pod CIDR %s", blockBits, p)
	}
	n := uint32(1) << min(blockBits-p.Bits(), maxIndexBits)
	s := &span{
		prefix: p,
		base:   addrU128(p.Addr()),
		shift:  uint(addrBits - blockBits),
		n:      n,
		words:  make([]uint64, (n+63)/64),
	}
	if r := n % 64; r != 0 {
		s.words[len(s.words)-1] = ^uint64(0) << r
	}
	return s, nil
}

// block returns the prefix of block i.
func (s *span) block(i uint32) netip.Prefix {
	a := s.base.add(shl(uint64(i), s.shift)).addr(s.prefix.Addr().Is4())
	return netip.PrefixFrom(a, s.prefix.Addr().BitLen()-int(s.shift))
}

// index returns the index of p when p is exactly one block of s.
func (s *span) index(p netip.Prefix) (uint32, bool) {
	if p.Bits() != s.prefix.Addr().BitLen()-int(s.shift) || p.Masked() != p || !s.prefix.Contains(p.Addr()) {
		return 0, false
	}
	i := addrU128(p.Addr()).sub(s.base).shr(s.shift)
	if i >= uint64(s.n) {
		return 0, false
	}
	return uint32(i), true
}

func (s *span) isSet(i uint32) bool { return s.words[i/64]&(1<<(i%64)) != 0 }

func (s *span) set(i uint32) {
	s.words[i/64] |= 1 << (i % 64)
	s.used++
}

func (s *span) clear(i uint32) {
	s.words[i/64] &^= 1 << (i % 64)
	s.used--
}

func (s *span) reset() {
	clear(s.words)
	if r := s.n % 64; r != 0 {
		s.words[len(s.words)-1] = ^uint64(0) << r
	}
	s.used, s.next = 0, 0
}

// take sets and returns a free block, searching from the cursor.
func (s *span) take() (uint32, bool) {
	if s.used >= s.n {
		return 0, false
	}
	nw := uint32(len(s.words))
	start := s.next / 64
	low := uint64(1)<<(s.next%64) - 1 // bits of the start word before the cursor
	for k := uint32(0); k <= nw; k++ {
		w := (start + k) % nw
		word := s.words[w]
		switch k {
		case 0:
			word |= low
		case nw:
			word |= ^low
		}
		if word != ^uint64(0) {
			i := w*64 + uint32(bits.TrailingZeros64(^word))
			s.set(i)
			s.next = (i + 1) % s.n
			return i, true
		}
	}
	return 0, false
}

// u128 is an address as a 128-bit number (IPv4 in the low 32 bits).
type u128 struct{ hi, lo uint64 }

func addrU128(a netip.Addr) u128 {
	if a.Is4() {
		b := a.As4()
		return u128{0, uint64(binary.BigEndian.Uint32(b[:]))}
	}
	b := a.As16()
	return u128{binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])}
}

func (u u128) addr(is4 bool) netip.Addr {
	if is4 {
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], uint32(u.lo))
		return netip.AddrFrom4(b)
	}
	var b [16]byte
	binary.BigEndian.PutUint64(b[:8], u.hi)
	binary.BigEndian.PutUint64(b[8:], u.lo)
	return netip.AddrFrom16(b)
}

func shl(v uint64, s uint) u128 {
	switch {
	case s == 0:
		return u128{0, v}
	case s >= 64:
		return u128{v << (s - 64), 0}
	}
	return u128{v >> (64 - s), v << s}
}

func (u u128) add(v u128) u128 {
	lo, c := bits.Add64(u.lo, v.lo, 0)
	hi, _ := bits.Add64(u.hi, v.hi, c)
	return u128{hi, lo}
}

func (u u128) sub(v u128) u128 {
	lo, b := bits.Sub64(u.lo, v.lo, 0)
	hi, _ := bits.Sub64(u.hi, v.hi, b)
	return u128{hi, lo}
}

// shr returns the low 64 bits of u >> s.
func (u u128) shr(s uint) uint64 {
	switch {
	case s == 0:
		return u.lo
	case s >= 64:
		return u.hi >> (s - 64)
	}
	return u.lo>>s | u.hi<<(64-s)
}
