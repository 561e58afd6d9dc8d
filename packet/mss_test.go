package packet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// verifyTCP checks the TCP checksum of b both with gopacket and with the
// independent recomputation.
func verifyTCP(t *testing.T, name string, b []byte) {
	t.Helper()
	if !tcpChecksumOK(b) {
		t.Errorf("%s: TCP checksum invalid by full recomputation", name)
	}
	p := decode(b)
	tl, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if tl == nil || p.NetworkLayer() == nil {
		t.Fatalf("%s: gopacket found no TCP or network layer", name)
	}
	if err := tl.SetNetworkLayerForChecksum(p.NetworkLayer()); err != nil {
		t.Fatal(err)
	}
	err, res := tl.VerifyChecksum()
	if err != nil || !res.Valid {
		t.Errorf("%s: gopacket checksum verification: %v, %+v", name, err, res)
	}
}

func TestClampMSS(t *testing.T) {
	sackOK := layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2}
	wscale := layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}}
	ts := layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}
	for _, v6 := range []bool{false, true} {
		for _, c := range []struct {
			name    string
			o       tcpOpts
			clampTo uint16
			changed bool
			wantMSS uint16
		}{
			{"syn", tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}}, 1360, true, 1360},
			{"syn-ack", tcpOpts{syn: true, ack: true, options: []layers.TCPOption{mssOption(1460)}}, 1360, true, 1360},
			{"odd offset", tcpOpts{syn: true, options: []layers.TCPOption{nop(), mssOption(65495)}}, 1220, true, 1220},
			{"after others", tcpOpts{syn: true, options: []layers.TCPOption{sackOK, ts, wscale, mssOption(9000)}}, 1400, true, 1400},
			{"odd after others", tcpOpts{syn: true, options: []layers.TCPOption{wscale, mssOption(8960), sackOK}}, 1400, true, 1400},
			{"with payload", tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}, payload: []byte("fast open!")}, 1300, true, 1300},
			{"already lower", tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1200)}}, 1360, false, 1200},
			{"equal", tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1360)}}, 1360, false, 1360},
			{"not syn", tcpOpts{ack: true, options: []layers.TCPOption{mssOption(1460)}}, 1360, false, 1460},
		} {
			name := c.name + map[bool]string{false: " v4", true: " v6"}[v6]
			b := buildTCP(t, v6, c.o)
			orig := append([]byte(nil), b...)
			if got := ClampMSS(b, c.clampTo); got != c.changed {
				t.Errorf("%s: ClampMSS = %v, want %v", name, got, c.changed)
			}
			if !c.changed && !bytes.Equal(b, orig) {
				t.Errorf("%s: packet modified although ClampMSS reported no change", name)
			}
			if mss, ok := mssOf(t, b); !ok || mss != c.wantMSS {
				t.Errorf("%s: MSS after clamp = %d, %v; want %d", name, mss, ok, c.wantMSS)
			}
			if _, err := Parse(b); err != nil {
				t.Errorf("%s: Parse after clamp: %v", name, err)
			}
			verifyTCP(t, name, b)
		}
	}
}

func TestClampMSSIPv4OptionsAndFragments(t *testing.T) {
	b := buildTCP(t, false, tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}})
	// Rebuild with one word of IPv4 options (NOP NOP NOP EOL) so the TCP
	// header starts at 24; gopacket recomputes both checksums.
	ip := ip4Layer(layers.IPProtocolTCP, src4, dst4)
	ip.Options = []layers.IPv4Option{{OptionType: 1}, {OptionType: 1}, {OptionType: 1}, {OptionType: 0}}
	tcp := &layers.TCP{SrcPort: 1, DstPort: 2, SYN: true, Window: 100, Options: []layers.TCPOption{nop(), mssOption(1460)}}
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	withOpts := serialize(t, ip, tcp)
	if withOpts[0]&0x0f != 6 {
		t.Fatalf("IHL = %d, want 6", withOpts[0]&0x0f)
	}
	if !ClampMSS(withOpts, 1300) {
		t.Fatal("ClampMSS did not clamp a packet with IPv4 options")
	}
	if mss, _ := mssOf(t, withOpts); mss != 1300 {
		t.Fatalf("MSS = %d, want 1300", mss)
	}
	verifyTCP(t, "ipv4 options", withOpts)

	// A first fragment (MF set, offset 0) still carries the TCP header.
	first := append([]byte(nil), b...)
	binary.BigEndian.PutUint16(first[6:], 0x2000)
	if !ClampMSS(first, 1300) {
		t.Error("ClampMSS did not clamp a first fragment")
	}
	// A later fragment carries no TCP header: its bytes must stay.
	later := append([]byte(nil), b...)
	binary.BigEndian.PutUint16(later[6:], 3)
	orig := append([]byte(nil), later...)
	if ClampMSS(later, 1300) || !bytes.Equal(later, orig) {
		t.Error("ClampMSS touched a non-initial fragment")
	}
}

func TestClampMSSLeavesOthersAlone(t *testing.T) {
	syn := func() []byte {
		return buildTCP(t, false, tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}})
	}
	udp := &layers.UDP{SrcPort: 53, DstPort: 53}
	ip := ip4Layer(layers.IPProtocolUDP, src4, dst4)
	_ = udp.SetNetworkLayerForChecksum(ip)
	// An IPv6 SYN behind a hop-by-hop header is out of scope.
	ip6 := ip6Layer(layers.IPProtocolIPv6HopByHop, src6, dst6)
	hbh := &layers.IPv6HopByHop{}
	hbh.NextHeader = layers.IPProtocolTCP
	hbh.Options = []*layers.IPv6HopByHopOption{{OptionType: 1, OptionLength: 4, OptionData: make([]byte, 4)}}
	tcp6 := &layers.TCP{SrcPort: 1, DstPort: 2, SYN: true, Options: []layers.TCPOption{mssOption(1460)}}
	_ = tcp6.SetNetworkLayerForChecksum(ip6)

	cases := map[string][]byte{
		"udp":            serialize(t, ip, udp, gopacket.Payload([]byte{2, 4, 5, 0xb4})),
		"no mss":         buildTCP(t, false, tcpOpts{syn: true}),
		"ipv6 ext hdr":   serialize(t, ip6, hbh, tcp6),
		"truncated tcp":  syn()[:30],
		"garbage":        {0x45, 0, 0, 20},
		"empty":          nil,
		"option len 0":   func() []byte { b := syn(); b[41] = 0; return b }(),
		"option len 1":   func() []byte { b := syn(); b[41] = 1; return b }(),
		"option overrun": func() []byte { b := syn(); b[41] = 5; return b }(),
		"mss len 3":      func() []byte { b := syn(); b[41] = 3; return b }(),
		"data offset 4":  func() []byte { b := syn(); b[32] = 0x40; return b }(),
		"data offset 15": func() []byte { b := syn(); b[32] = 0xf0; return b }(),
		"end of options": func() []byte { b := syn(); b[40] = 0; return b }(),
	}
	// Keep the IPv4 total length consistent for the truncated case.
	binary.BigEndian.PutUint16(cases["truncated tcp"][2:], 30)
	for name, b := range cases {
		orig := append([]byte(nil), b...)
		if ClampMSS(b, 500) || !bytes.Equal(b, orig) {
			t.Errorf("%s: ClampMSS changed the packet", name)
		}
	}
}

func TestClampMSSAllocs(t *testing.T) {
	b := buildTCP(t, true, tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}})
	allocs := testing.AllocsPerRun(100, func() {
		binary.BigEndian.PutUint16(b[62:], 1460) // checksum drifts; irrelevant here
		ClampMSS(b, 1300)
	})
	if allocs != 0 {
		t.Fatalf("ClampMSS allocates %v times", allocs)
	}
}
