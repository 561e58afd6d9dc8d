package lpm

import (
	"net/netip"
	"testing"
)

// FuzzLookup decodes data as a program of inserts and lookups and checks
// every lookup against the naive reference. Each record starts with an
// opcode byte: bit 7 clear inserts, set looks up; bit 0 selects IPv6; for a
// lookup, bit 1 asks for the IPv4-mapped form of an IPv4 address. An insert
// continues with a prefix-length byte; both continue with the address bytes
// (4 or 16, missing trailing bytes read as zero).
func FuzzLookup(f *testing.F) {
	f.Add([]byte{
		0x00, 8, 10, 0, 0, 0, // insert 10.0.0.0/8
		0x00, 32, 10, 1, 2, 3, // insert 10.1.2.3/32
		0x80, 10, 1, 2, 3, // lookup 10.1.2.3
		0x82, 10, 1, 2, 4, // lookup ::ffff:10.1.2.4
	})
	f.Fuzz(func(t *testing.T, data []byte) {
		var tab Table[int]
		var ref naive[int]
		var probes []netip.Addr
		for i := 0; len(data) > 0; i++ {
			op := data[0]
			data = data[1:]
			plen := 0
			if op&0x80 == 0 && len(data) > 0 {
				plen = int(data[0])
				data = data[1:]
			}
			var b [16]byte
			n := 4
			if op&1 != 0 {
				n = 16
			}
			data = data[copy(b[:n], data):]
			a := netip.AddrFrom16(b)
			if n == 4 {
				a = netip.AddrFrom4([4]byte(b[:4]))
			}
			if op&0x80 == 0 {
				p := netip.PrefixFrom(a, plen%(8*n+1))
				tab.Insert(p, i)
				ref.insert(p, i)
				probes = append(probes, a, lastAddr(p))
				continue
			}
			if n == 4 && op&2 != 0 {
				a = netip.AddrFrom16(a.As16())
			}
			probes = append(probes, a)
		}
		if tab.Len() != len(ref.routes) {
			t.Fatalf("Len = %d, reference has %d", tab.Len(), len(ref.routes))
		}
		for _, a := range probes {
			wantP, wantV, wantOK := ref.lookup(a)
			gotP, gotV, gotOK := tab.LookupPrefix(a)
			if gotP != wantP || gotV != wantV || gotOK != wantOK {
				t.Fatalf("LookupPrefix(%v) = %v, %d, %v; want %v, %d, %v",
					a, gotP, gotV, gotOK, wantP, wantV, wantOK)
			}
		}
		checkAll(t, &tab, &ref)
	})
}

// lastAddr returns the highest address inside p.
func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := range b {
		if keep := p.Bits() - 8*i; keep < 8 {
			if keep < 0 {
				keep = 0
			}
			b[i] |= 0xff >> keep
		}
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}
