package lpm

import (
	"net/netip"
	"testing"
)

func TestLookupOverlapping(t *testing.T) {
	var tab Table[string]
	for _, r := range []struct{ p, v string }{
		{"0.0.0.0/0", "v4 default"},
		{"10.0.0.0/8", "ten"},
		{"10.1.0.0/16", "ten-one"},
		{"10.1.2.0/24", "ten-one-two"},
		{"10.1.2.3/32", "host"},
		{"10.1.2.128/25", "upper half"},
		{"192.168.0.0/15", "odd length"},
		{"::/0", "v6 default"},
		{"2001:db8::/32", "doc"},
		{"2001:db8:1::/48", "doc-1"},
		{"2001:db8:1::1/128", "v6 host"},
		{"2001:db8:1:0:8000::/65", "nibble"},
		{"fe80::/10", "link-local"},
	} {
		tab.Insert(netip.MustParsePrefix(r.p), r.v)
	}
	if tab.Len() != 13 {
		t.Fatalf("Len = %d, want 13", tab.Len())
	}
	for _, c := range []struct {
		addr, prefix, v string
	}{
		{"10.1.2.3", "10.1.2.3/32", "host"},
		{"10.1.2.4", "10.1.2.0/24", "ten-one-two"},
		{"10.1.2.200", "10.1.2.128/25", "upper half"},
		{"10.1.3.1", "10.1.0.0/16", "ten-one"},
		{"10.200.0.1", "10.0.0.0/8", "ten"},
		{"11.0.0.1", "0.0.0.0/0", "v4 default"},
		{"192.169.255.255", "192.168.0.0/15", "odd length"},
		{"192.170.0.0", "0.0.0.0/0", "v4 default"},
		{"255.255.255.255", "0.0.0.0/0", "v4 default"},
		{"::ffff:10.1.2.3", "10.1.2.3/32", "host"}, // IPv4-mapped looks up IPv4
		{"2001:db8:1::1", "2001:db8:1::1/128", "v6 host"},
		{"2001:db8:1::2", "2001:db8:1::/48", "doc-1"},
		{"2001:db8:1:0:8000::5", "2001:db8:1:0:8000::/65", "nibble"},
		{"2001:db8:2::1", "2001:db8::/32", "doc"},
		{"fe80::1%eth0", "fe80::/10", "link-local"}, // zone ignored
		{"2002::1", "::/0", "v6 default"},
	} {
		a := netip.MustParseAddr(c.addr)
		p, v, ok := tab.LookupPrefix(a)
		if !ok || p != netip.MustParsePrefix(c.prefix) || v != c.v {
			t.Errorf("LookupPrefix(%s) = %v, %q, %v; want %s, %q", c.addr, p, v, ok, c.prefix, c.v)
		}
		if v, ok := tab.Lookup(a); !ok || v != c.v {
			t.Errorf("Lookup(%s) = %q, %v; want %q", c.addr, v, ok, c.v)
		}
	}
}

func TestLookupMiss(t *testing.T) {
	var empty Table[int]
	for _, a := range []netip.Addr{{}, netip.MustParseAddr("1.2.3.4"), netip.MustParseAddr("::1")} {
		if _, ok := empty.Lookup(a); ok {
			t.Errorf("empty table: Lookup(%v) matched", a)
		}
	}
	var tab Table[int]
	tab.Insert(netip.MustParsePrefix("10.0.0.0/8"), 1)
	tab.Insert(netip.MustParsePrefix("10.1.2.3/32"), 2)
	tab.Insert(netip.MustParsePrefix("2001:db8::/32"), 3)
	for _, s := range []string{"11.0.0.0", "9.255.255.255", "2001:db9::", "::a00:1", "64:ff9b::a00:1"} {
		if p, v, ok := tab.LookupPrefix(netip.MustParseAddr(s)); ok {
			t.Errorf("LookupPrefix(%s) = %v, %d; want no match", s, p, v)
		}
	}
	if _, ok := tab.Lookup(netip.Addr{}); ok {
		t.Error("zero Addr matched")
	}
}

func TestInsertReplaceAndMask(t *testing.T) {
	var tab Table[int]
	tab.Insert(netip.MustParsePrefix("10.1.2.3/8"), 1) // masked to 10.0.0.0/8
	tab.Insert(netip.MustParsePrefix("10.0.0.0/8"), 2) // replaces
	tab.Insert(netip.MustParsePrefix("10.9.9.9/32"), 3)
	tab.Insert(netip.MustParsePrefix("10.9.9.9/32"), 4) // replaces a leaf
	tab.Insert(netip.MustParsePrefix("10.9.9.8/32"), 5) // splits the leaf
	tab.Insert(netip.MustParsePrefix("10.9.9.9/32"), 6) // replaces below the split
	tab.Insert(netip.MustParsePrefix("::ffff:10.0.0.0/104"), 7)
	tab.Insert(netip.Prefix{}, 8)                                       // invalid: ignored
	tab.Insert(netip.PrefixFrom(netip.MustParseAddr("1.2.3.4"), 33), 9) // invalid
	if tab.Len() != 3 {
		t.Fatalf("Len = %d, want 3", tab.Len())
	}
	for _, c := range []struct {
		addr string
		v    int
	}{{"10.0.0.1", 7}, {"10.9.9.9", 6}, {"10.9.9.8", 5}, {"::ffff:10.9.9.7", 7}} {
		if v, ok := tab.Lookup(netip.MustParseAddr(c.addr)); !ok || v != c.v {
			t.Errorf("Lookup(%s) = %d, %v; want %d", c.addr, v, ok, c.v)
		}
	}
}

func TestDefaultAndHostRoutesOnly(t *testing.T) {
	var tab Table[int]
	tab.Insert(netip.MustParsePrefix("0.0.0.0/0"), 1)
	tab.Insert(netip.MustParsePrefix("::/0"), 2)
	tab.Insert(netip.MustParsePrefix("203.0.113.7/32"), 3)
	tab.Insert(netip.MustParsePrefix("2001:db8::7/128"), 4)
	tab.Insert(netip.MustParsePrefix("2001:db8::6/128"), 5)
	for _, c := range []struct {
		addr, p string
		v       int
	}{
		{"203.0.113.7", "203.0.113.7/32", 3},
		{"203.0.113.6", "0.0.0.0/0", 1},
		{"2001:db8::7", "2001:db8::7/128", 4},
		{"2001:db8::6", "2001:db8::6/128", 5},
		{"2001:db8::5", "::/0", 2},
		{"::ffff:203.0.113.6", "0.0.0.0/0", 1},
	} {
		p, v, ok := tab.LookupPrefix(netip.MustParseAddr(c.addr))
		if !ok || v != c.v || p != netip.MustParsePrefix(c.p) {
			t.Errorf("LookupPrefix(%s) = %v, %d, %v; want %s, %d", c.addr, p, v, ok, c.p, c.v)
		}
	}
}

func TestAllStopsEarly(t *testing.T) {
	var tab Table[int]
	for i, s := range []string{"10.0.0.0/8", "10.1.0.0/16", "2001:db8::/32", "::/0"} {
		tab.Insert(netip.MustParsePrefix(s), i)
	}
	var got []string
	for p := range tab.All {
		got = append(got, p.String())
		if len(got) == 3 {
			break
		}
	}
	want := []string{"10.0.0.0/8", "10.1.0.0/16", "::/0"}
	if len(got) != 3 || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("All = %v, want %v", got, want)
	}
	var empty Table[int]
	for p := range empty.All {
		t.Fatalf("empty table yielded %v", p)
	}
}

func TestLookupAllocs(t *testing.T) {
	var tab Table[int]
	tab.Insert(netip.MustParsePrefix("10.0.0.0/8"), 1)
	tab.Insert(netip.MustParsePrefix("10.1.2.3/32"), 2)
	tab.Insert(netip.MustParsePrefix("2001:db8::/32"), 3)
	tab.Insert(netip.MustParsePrefix("2001:db8::1/128"), 4)
	addrs := []netip.Addr{
		netip.MustParseAddr("10.1.2.3"),
		netip.MustParseAddr("10.2.2.3"),
		netip.MustParseAddr("::ffff:10.1.2.3"),
		netip.MustParseAddr("2001:db8::1"),
		netip.MustParseAddr("fe80::1%eth0"),
		{},
	}
	allocs := testing.AllocsPerRun(100, func() {
		for _, a := range addrs {
			tab.Lookup(a)
			tab.LookupPrefix(a)
		}
	})
	if allocs != 0 {
		t.Fatalf("Lookup allocates %v times per run", allocs)
	}
}
