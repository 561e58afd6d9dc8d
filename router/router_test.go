package router

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"go.uber.org/goleak"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPairBothWays sends packets both ways through two gateways on channel
// TUNs and loopback UDP, IPv4 and IPv6, with both ciphers: what comes out
// of the far TUN is byte for byte what went into the near one.
func TestPairBothWays(t *testing.T) {
	for _, cipher := range []bhcrypto.CipherKind{bhcrypto.AESGCM, bhcrypto.ChaChaPoly} {
		t.Run(cipher.String(), func(t *testing.T) {
			a, b := newLoopbackPair(t, cipher, nil)
			for i, tc := range []struct {
				from, to *gateway
				pkt      []byte
			}{
				{a, b, udpPacket(t, podA, podB, []byte("hello from A"))},
				{b, a, udpPacket(t, podB, podA, []byte("hello from B"))},
				{a, b, udpPacket(t, podA6, podB6, []byte("v6 from A"))},
				{b, a, udpPacket(t, podB6, podA6, []byte("v6 from B"))},
				{a, b, udpPacket(t, podA, podB, bytes.Repeat([]byte{0xab}, 1420-28))}, // exactly MTU
				{a, b, udpPacket(t, podA, podB, nil)},                                 // needs padding
			} {
				if err := tc.from.tun.Inject(tc.pkt); err != nil {
					t.Fatal(err)
				}
				got := tc.to.expectPacket(t)
				if !bytes.Equal(got, tc.pkt) {
					t.Fatalf("case %d: delivered packet differs:\n got % x\nwant % x", i, got, tc.pkt)
				}
			}
			// Many packets in a row keep their order.
			for i := range 200 {
				if err := a.tun.Inject(udpPacket(t, podA, podB, []byte(fmt.Sprint(i)))); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 200 {
				got := b.expectPacket(t)
				if want := udpPacket(t, podA, podB, []byte(fmt.Sprint(i))); !bytes.Equal(got, want) {
					t.Fatalf("packet %d out of order or changed", i)
				}
			}
			for _, g := range []*gateway{a, b} {
				for _, r := range Reasons() {
					for _, d := range []Direction{Inside, Outside} {
						if n := g.r.drops.Get(d, r); n != 0 {
							t.Errorf("%s dropped %d packets for %s/%s", g.tun.Name(), n, d, r)
						}
					}
				}
			}
			// Counters are bumped after Send returns: the far side may
			// have the packets first.
			waitFor(t, "A's counters", func() bool { return a.r.Peers()[0].TxPackets >= 203 })
			ps := a.r.Peers()
			if len(ps) != 1 || ps[0].TxPackets < 203 || ps[0].RxPackets < 2 || ps[0].LastHandshake.IsZero() {
				t.Errorf("peer stats of A: %+v", ps)
			}
		})
	}
}

// TestSpoofedSourceDropped: B delivers only packets whose inner source is
// in the sending gateway's site, and only to its own site.
func TestSpoofedSourceDropped(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	// Establish the session first.
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)

	spoofed := []struct {
		name string
		src  string
		dst  string
		want Reason
	}{
		{"source in no site", "10.99.0.1", "10.245.1.10", ReasonSpoofedSource},
		{"source in the receiver's own site", "10.245.7.7", "10.245.1.10", ReasonSpoofedSource},
		{"IPv6 source in no site", "fd00:999::1", "fd00:245:0:1::10", ReasonSpoofedSource},
	}
	for i, tc := range spoofed {
		pkt := udpPacket(t, mustAddr(tc.src), mustAddr(tc.dst), []byte(tc.name))
		a.tun.Inject(pkt)
		waitDrop(t, b.r, Outside, tc.want, uint64(i+1))
	}
	b.expectNoPacket(t)
	// A genuine packet still goes through afterwards.
	good := udpPacket(t, podA, podB, []byte("still fine"))
	a.tun.Inject(good)
	if got := b.expectPacket(t); !bytes.Equal(got, good) {
		t.Fatal("genuine packet after spoofed ones not delivered intact")
	}
}

// TestInsideDrops: the inside path refuses what it cannot route.
func TestInsideDrops(t *testing.T) {
	a, _ := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	cases := []struct {
		name string
		pkt  []byte
		want Reason
	}{
		{"no route", udpPacket(t, podA, mustAddr("8.8.8.8"), nil), ReasonNoRoute},
		{"multicast", udpPacket(t, mustAddr("fe80::1"), mustAddr("ff02::16"), nil), ReasonNotUnicast},
		{"link-local", udpPacket(t, mustAddr("fe80::1"), mustAddr("fe80::2"), nil), ReasonNotUnicast},
		{"own site", udpPacket(t, podA, mustAddr("10.244.2.2"), nil), ReasonLocalDestination},
		{"garbage", []byte{0x00, 0x01, 0x02}, ReasonMalformed},
		{"empty", []byte{}, ReasonMalformed},
		{"bad version", append([]byte{0x55}, make([]byte, 40)...), ReasonMalformed},
	}
	for _, tc := range cases {
		before := a.r.drops.Get(Inside, tc.want)
		a.tun.Inject(tc.pkt)
		waitDrop(t, a.r, Inside, tc.want, before+1)
	}
}

// tcpSYN builds a TCP SYN with an MSS option.
func tcpSYN(t *testing.T, src, dst netip.Addr, mss uint16) []byte {
	t.Helper()
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 80, SYN: true, Window: 65535, Seq: 1,
		Options: []layers.TCPOption{{OptionType: layers.TCPOptionKindMSS, OptionLength: 4, OptionData: []byte{byte(mss >> 8), byte(mss)}}}}
	var ipl gopacket.SerializableLayer
	var nl gopacket.NetworkLayer
	if src.Is4() {
		l := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
		ipl, nl = l, l
	} else {
		l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolTCP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ipl, nl = l, l
	}
	tcp.SetNetworkLayerForChecksum(nl)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ipl, tcp); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// mssOf decodes a delivered SYN, checks its TCP checksum, returns its MSS.
func mssOf(t *testing.T, pkt []byte) uint16 {
	t.Helper()
	first := layers.LayerTypeIPv4
	if pkt[0]>>4 == 6 {
		first = layers.LayerTypeIPv6
	}
	p := gopacket.NewPacket(pkt, first, gopacket.Default)
	tcp, ok := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if !ok {
		t.Fatalf("no TCP layer in % x", pkt)
	}
	nl := p.NetworkLayer()
	tcp.SetNetworkLayerForChecksum(nl)
	if err, res := tcp.VerifyChecksum(); err != nil || !res.Valid {
		t.Fatalf("TCP checksum invalid after clamping (%v %+v)", err, res)
	}
	for _, o := range tcp.Options {
		if o.OptionType == layers.TCPOptionKindMSS {
			return uint16(o.OptionData[0])<<8 | uint16(o.OptionData[1])
		}
	}
	t.Fatal("no MSS option")
	return 0
}

// TestClampMSSBothWays: SYNs leaving and entering through the tunnel carry
// an MSS that fits the tunnel MTU (1420 - 40 for IPv4, - 60 for IPv6).
func TestClampMSSBothWays(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	for _, g := range []*gateway{a, b} {
		local := "site-a"
		if g == b {
			local = "site-b"
		}
		cfg := twoSiteConfig(local, a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
		cfg.ClampMSS = true
		if err := g.r.SetConfig(cfg); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		from, to *gateway
		src, dst netip.Addr
		in, want uint16
	}{
		{a, b, podA, podB, 1460, 1380},
		{b, a, podB, podA, 8960, 1380},
		{a, b, podA6, podB6, 1440, 1360},
		{a, b, podA, podB, 1200, 1200}, // already small: untouched
	}
	for _, tc := range cases {
		tc.from.tun.Inject(tcpSYN(t, tc.src, tc.dst, tc.in))
		if got := mssOf(t, tc.to.expectPacket(t)); got != tc.want {
			t.Errorf("%s -> %s MSS %d: delivered %d, want %d", tc.src, tc.dst, tc.in, got, tc.want)
		}
	}
}

// TestTooBigICMP: a packet over the tunnel MTU with DF set is dropped and
// its sender gets an ICMP "fragmentation needed" carrying the MTU.
func TestTooBigICMP(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	cfg := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfg.ICMPSource4 = netip.MustParseAddr("10.224.0.4")
	if err := a.r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	big := udpPacket(t, podA, podB, make([]byte, 1440-28)) // DF set by udpPacket
	a.tun.Inject(big)
	reply := a.expectPacket(t)
	p := gopacket.NewPacket(reply, layers.LayerTypeIPv4, gopacket.Default)
	ip, _ := p.Layer(layers.LayerTypeIPv4).(*layers.IPv4)
	icmp, _ := p.Layer(layers.LayerTypeICMPv4).(*layers.ICMPv4)
	if ip == nil || icmp == nil {
		t.Fatalf("not an ICMP packet: % x", reply)
	}
	if !ip.SrcIP.Equal(cfg.ICMPSource4.AsSlice()) || !ip.DstIP.Equal(podA.AsSlice()) {
		t.Errorf("ICMP from %s to %s, want from the gateway to the sender", ip.SrcIP, ip.DstIP)
	}
	if icmp.TypeCode != layers.CreateICMPv4TypeCode(3, 4) || icmp.Seq != 1420 {
		t.Errorf("ICMP %s with next-hop MTU %d, want fragmentation needed, 1420", icmp.TypeCode, icmp.Seq)
	}
	waitDrop(t, a.r, Inside, ReasonTooBig, 1)
	b.expectNoPacket(t)
}
