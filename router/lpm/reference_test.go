package lpm

import (
	"math/rand/v2"
	"net/netip"
)

// naive is the obviously correct reference: a list of routes scanned in
// full for every lookup.
type naive[V any] struct {
	routes []naiveRoute[V]
}

type naiveRoute[V any] struct {
	p netip.Prefix
	v V
}

func (r *naive[V]) insert(p netip.Prefix, v V) {
	p, ok := normalize(p)
	if !ok {
		return
	}
	for i := range r.routes {
		if r.routes[i].p == p {
			r.routes[i].v = v
			return
		}
	}
	r.routes = append(r.routes, naiveRoute[V]{p, v})
}

func (r *naive[V]) lookup(a netip.Addr) (netip.Prefix, V, bool) {
	a = a.Unmap().WithZone("")
	best := -1
	for i, rt := range r.routes {
		if rt.p.Contains(a) && (best < 0 || rt.p.Bits() > r.routes[best].p.Bits()) {
			best = i
		}
	}
	if best < 0 {
		var zero V
		return netip.Prefix{}, zero, false
	}
	return r.routes[best].p, r.routes[best].v, true
}

// randAddr returns a random address of the family, IPv4 if bits is 32.
func randAddr(rng *rand.Rand, bits int) netip.Addr {
	var b [16]byte
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	if bits == 32 {
		return netip.AddrFrom4([4]byte(b[:4]))
	}
	return netip.AddrFrom16(b)
}

// randInside returns a random address inside p.
func randInside(rng *rand.Rand, p netip.Prefix) netip.Addr {
	a := p.Addr()
	r := randAddr(rng, a.BitLen())
	pb, rb := a.AsSlice(), r.AsSlice()
	for i := range pb {
		keep := p.Bits() - 8*i // bits of this byte that come from p
		switch {
		case keep >= 8:
			rb[i] = pb[i]
		case keep > 0:
			m := byte(0xff << (8 - keep))
			rb[i] = pb[i]&m | rb[i]&^m
		}
	}
	out, _ := netip.AddrFromSlice(rb)
	return out
}

// prefixGen makes random prefixes of both families, biased so that many
// nest inside earlier ones: it often extends or shortens a previous prefix.
type prefixGen struct {
	rng  *rand.Rand
	seen []netip.Prefix
}

func (g *prefixGen) next() netip.Prefix {
	rng := g.rng
	if len(g.seen) > 0 && rng.IntN(3) > 0 {
		base := g.seen[rng.IntN(len(g.seen))]
		max := base.Addr().BitLen()
		var plen int
		if rng.IntN(4) == 0 {
			plen = rng.IntN(base.Bits() + 1) // a covering prefix
		} else {
			plen = base.Bits() + rng.IntN(max-base.Bits()+1) // nested
		}
		p := netip.PrefixFrom(randInside(rng, base), plen).Masked()
		g.seen = append(g.seen, p)
		return p
	}
	bits := 32
	if rng.IntN(2) == 0 {
		bits = 128
	}
	p := netip.PrefixFrom(randAddr(rng, bits), rng.IntN(bits+1)).Masked()
	g.seen = append(g.seen, p)
	return p
}
