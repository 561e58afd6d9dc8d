package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	router4 = netip.MustParseAddr("10.255.0.1")
	router6 = netip.MustParseAddr("fd00:ff::1")
)

func bigTCP(t testing.TB, v6 bool, payload int) []byte {
	return buildTCP(t, v6, tcpOpts{ack: true, payload: bytes.Repeat([]byte{0xab}, payload)})
}

func buildICMP4(t *testing.T, typ, code uint8) []byte {
	icmp := &layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(typ, code)}
	return serialize(t, ip4Layer(layers.IPProtocolICMPv4, src4, dst4), icmp, gopacket.Payload(make([]byte, 64)))
}

func buildICMP6(t *testing.T, typ uint8, hopByHop bool) []byte {
	icmp := &layers.ICMPv6{TypeCode: layers.CreateICMPv6TypeCode(typ, 0)}
	if !hopByHop {
		ip := ip6Layer(layers.IPProtocolICMPv6, src6, dst6)
		_ = icmp.SetNetworkLayerForChecksum(ip)
		return serialize(t, ip, icmp, gopacket.Payload(make([]byte, 64)))
	}
	ip := ip6Layer(layers.IPProtocolIPv6HopByHop, src6, dst6)
	hbh := &layers.IPv6HopByHop{}
	hbh.NextHeader = layers.IPProtocolICMPv6
	hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}}
	_ = icmp.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, hbh, icmp, gopacket.Payload(make([]byte, 64)))
}

// checkTooBig4 decodes an ICMPv4 fragmentation-needed message with
// gopacket and checks every field and both checksums.
func checkTooBig4(t *testing.T, name string, msg, orig []byte, mtu int, wantQuote int) {
	t.Helper()
	p := decode(msg)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if ip == nil || icmp == nil {
		t.Fatalf("%s: gopacket decode failed: %v", name, p.ErrorLayer())
	}
	if err, r := ip.VerifyChecksum(); err != nil || !r.Valid {
		t.Errorf("%s: IPv4 checksum: %v %+v", name, err, r)
	}
	if err, r := icmp.VerifyChecksum(); err != nil || !r.Valid {
		t.Errorf("%s: ICMPv4 checksum: %v %+v", name, err, r)
	}
	if !ip.SrcIP.Equal(router4.AsSlice()) || !ip.DstIP.Equal(src4.AsSlice()) || ip.Protocol != layers.IPProtocolICMPv4 ||
		int(ip.Length) != len(msg) || ip.TTL == 0 || ip.IHL != 5 {
		t.Errorf("%s: bad IPv4 header %+v", name, ip)
	}
	if icmp.TypeCode != layers.CreateICMPv4TypeCode(layers.ICMPv4TypeDestinationUnreachable, layers.ICMPv4CodeFragmentationNeeded) {
		t.Errorf("%s: type/code %v", name, icmp.TypeCode)
	}
	if got := binary.BigEndian.Uint16(msg[26:28]); int(got) != mtu || binary.BigEndian.Uint16(msg[24:26]) != 0 {
		t.Errorf("%s: next-hop MTU field %d, want %d (and unused 0)", name, got, mtu)
	}
	if len(msg) != 28+wantQuote || !bytes.Equal(icmp.Payload, orig[:wantQuote]) {
		t.Errorf("%s: quoted %d bytes, want the first %d of the packet", name, len(icmp.Payload), wantQuote)
	}
}

// checkTooBig6 does the same for ICMPv6 packet too big.
func checkTooBig6(t *testing.T, name string, msg, orig []byte, mtu int, wantQuote int) {
	t.Helper()
	p := decode(msg)
	ip, _ := p.Layer(layers.LayerTypeIPv6).(*layers.IPv6)
	icmp, _ := p.Layer(layers.LayerTypeICMPv6).(*layers.ICMPv6)
	if ip == nil || icmp == nil {
		t.Fatalf("%s: gopacket decode failed: %v", name, p.ErrorLayer())
	}
	if err := icmp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	if err, r := icmp.VerifyChecksum(); err != nil || !r.Valid {
		t.Errorf("%s: ICMPv6 checksum: %v %+v", name, err, r)
	}
	if !ip.SrcIP.Equal(router6.AsSlice()) || !ip.DstIP.Equal(src6.AsSlice()) || ip.NextHeader != layers.IPProtocolICMPv6 ||
		int(ip.Length) != len(msg)-40 || ip.HopLimit == 0 {
		t.Errorf("%s: bad IPv6 header %+v", name, ip)
	}
	if icmp.TypeCode != layers.CreateICMPv6TypeCode(layers.ICMPv6TypePacketTooBig, 0) {
		t.Errorf("%s: type/code %v", name, icmp.TypeCode)
	}
	if got := binary.BigEndian.Uint32(msg[44:48]); int(got) != mtu {
		t.Errorf("%s: MTU field %d, want %d", name, got, mtu)
	}
	if len(msg) != 48+wantQuote || !bytes.Equal(msg[48:], orig[:wantQuote]) {
		t.Errorf("%s: quoted %d bytes, want the first %d of the packet", name, len(msg)-48, wantQuote)
	}
}

func TestICMPTooBig4(t *testing.T) {
	big := bigTCP(t, false, 1460)
	small := bigTCP(t, false, 20)
	padded := append(append([]byte(nil), small...), make([]byte, 30)...)
	echo := buildICMP4(t, layers.ICMPv4TypeEchoRequest, 0)
	dst := make([]byte, 2000)
	for _, c := range []struct {
		name  string
		orig  []byte
		dst   int
		quote int
	}{
		{"large packet: 576 bytes in all", big, 2000, 576 - 28},
		{"small packet quoted whole", small, 2000, len(small)},
		{"padding not quoted", padded, 2000, len(small)},
		{"echo request answered", echo, 2000, len(echo)},
		{"limited by dst", big, 28 + 100, 100},
		{"minimum quote", big, 28 + 28, 28},
	} {
		n := ICMPTooBig(dst[:c.dst], c.orig, router4, 1400)
		if n == 0 {
			t.Errorf("%s: no message", c.name)
			continue
		}
		checkTooBig4(t, c.name, dst[:n], c.orig, 1400, c.quote)
	}
	// IPv4-mapped source address counts as IPv4.
	if n := ICMPTooBig(dst, big, netip.AddrFrom16(router4.As16()), 1400); n != 576 {
		t.Errorf("mapped source: n = %d", n)
	}
}

func TestICMPTooBig6(t *testing.T) {
	big := bigTCP(t, true, 1440)
	small := bigTCP(t, true, 20)
	padded := append(append([]byte(nil), small...), make([]byte, 30)...)
	echo := buildICMP6(t, layers.ICMPv6TypeEchoRequest, false)
	echoHBH := buildICMP6(t, layers.ICMPv6TypeEchoRequest, true)
	dst := make([]byte, 2000)
	for _, c := range []struct {
		name  string
		orig  []byte
		dst   int
		quote int
	}{
		{"large packet: 1280 bytes in all", big, 2000, 1280 - 48},
		{"small packet quoted whole", small, 2000, len(small)},
		{"padding not quoted", padded, 2000, len(small)},
		{"echo request answered", echo, 2000, len(echo)},
		{"echo behind hop-by-hop answered", echoHBH, 2000, len(echoHBH)},
		{"limited by dst", big, 48 + 100, 100},
		{"minimum quote", big, 48 + 48, 48},
	} {
		n := ICMPTooBig(dst[:c.dst], c.orig, router6, 1280)
		if n == 0 {
			t.Errorf("%s: no message", c.name)
			continue
		}
		checkTooBig6(t, c.name, dst[:n], c.orig, 1280, c.quote)
	}
	if n := ICMPTooBig(dst, big, netip.MustParseAddr("fe80::1%eth0"), 1500); n != 1280 {
		t.Errorf("zoned source: n = %d", n)
	}
}

func TestICMPTooBigRefuses(t *testing.T) {
	big4 := bigTCP(t, false, 1000)
	big6 := bigTCP(t, true, 1000)
	mod := func(b []byte, f func([]byte)) []byte {
		b = append([]byte(nil), b...)
		f(b)
		return b
	}
	setSrc4 := func(a string) func([]byte) {
		return func(b []byte) { s := netip.MustParseAddr(a).As4(); copy(b[12:16], s[:]) }
	}
	setSrc6 := func(a string) func([]byte) {
		return func(b []byte) { s := netip.MustParseAddr(a).As16(); copy(b[8:24], s[:]) }
	}
	dst := make([]byte, 2000)
	for _, c := range []struct {
		name string
		dst  []byte
		orig []byte
		src  netip.Addr
		mtu  int
	}{
		{"invalid orig", dst, big4[:30], router4, 1400},
		{"empty orig", dst, nil, router4, 1400},
		{"dst too small v4", dst[:28+27], big4, router4, 1400},
		{"dst too small v6", dst[:48+47], big6, router6, 1400},
		{"nil dst", nil, big4, router4, 1400},
		{"v6 source for v4", dst, big4, router6, 1400},
		{"v4 source for v6", dst, big6, router4, 1400},
		{"v4-mapped source for v6", dst, big6, netip.AddrFrom16(router4.As16()), 1400},
		{"zero source", dst, big4, netip.Addr{}, 1400},
		{"mtu below 68", dst, big4, router4, 67},
		{"mtu above 65535", dst, big4, router4, 65536},
		{"negative mtu", dst, big4, router4, -1},
		{"mtu below 1280", dst, big6, router6, 1279},
		{"mtu above 2^32-1", dst, big6, router6, 1 << 40},
		{"icmp4 unreachable", dst, buildICMP4(t, 3, 4), router4, 1400},
		{"icmp4 time exceeded", dst, buildICMP4(t, 11, 0), router4, 1400},
		{"icmp4 parameter problem", dst, buildICMP4(t, 12, 0), router4, 1400},
		{"icmp4 redirect", dst, buildICMP4(t, 5, 0), router4, 1400},
		{"icmp4 without type", dst, mod(buildICMP4(t, 8, 0)[:20], func(b []byte) { b[3] = 20 }), router4, 1400},
		{"icmp6 packet too big", dst, buildICMP6(t, 2, false), router6, 1400},
		{"icmp6 unreachable", dst, buildICMP6(t, 1, false), router6, 1400},
		{"icmp6 error behind hop-by-hop", dst, buildICMP6(t, 3, true), router6, 1400},
		{"v4 non-initial fragment", dst, mod(big4, func(b []byte) { b[7] = 1 }), router4, 1400},
		{"v4 to broadcast", dst, mod(big4, func(b []byte) { copy(b[16:20], []byte{255, 255, 255, 255}) }), router4, 1400},
		{"v4 to multicast", dst, mod(big4, func(b []byte) { copy(b[16:20], []byte{224, 0, 0, 5}) }), router4, 1400},
		{"v4 from 0.0.0.0", dst, mod(big4, setSrc4("0.0.0.0")), router4, 1400},
		{"v4 from multicast", dst, mod(big4, setSrc4("239.1.1.1")), router4, 1400},
		{"v4 from loopback", dst, mod(big4, setSrc4("127.0.0.1")), router4, 1400},
		{"v6 from ::", dst, mod(big6, setSrc6("::")), router6, 1400},
		{"v6 from multicast", dst, mod(big6, setSrc6("ff02::1")), router6, 1400},
	} {
		before := append([]byte(nil), c.dst...)
		if n := ICMPTooBig(c.dst, c.orig, c.src, c.mtu); n != 0 {
			t.Errorf("%s: wrote %d bytes, want none", c.name, n)
		}
		if !bytes.Equal(before, c.dst) {
			t.Errorf("%s: dst modified", c.name)
		}
	}
}

func TestICMPTooBigAliasing(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		orig := bigTCP(t, v6, 1400)
		src := router4
		if v6 {
			src = router6
		}
		want := make([]byte, 2000)
		n := ICMPTooBig(want, orig, src, 1300)
		buf := append(make([]byte, 0, 2000), orig...)
		buf = buf[:cap(buf)]
		if got := ICMPTooBig(buf, buf[:len(orig)], src, 1300); got != n || !bytes.Equal(buf[:n], want[:n]) {
			t.Errorf("v6=%v: in-place result differs (n=%d, want %d)", v6, got, n)
		}
	}
}

func TestICMPTooBigAllocs(t *testing.T) {
	o4, o6 := bigTCP(t, false, 1400), bigTCP(t, true, 1400)
	dst := make([]byte, 1500)
	allocs := testing.AllocsPerRun(100, func() {
		ICMPTooBig(dst, o4, router4, 1400)
		ICMPTooBig(dst, o6, router6, 1400)
		ICMPTooBig(dst, o4[:10], router4, 1400)
	})
	if allocs != 0 {
		t.Fatalf("ICMPTooBig allocates %v times", allocs)
	}
}
