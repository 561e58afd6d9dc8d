package packet

import (
	"net"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

var (
	src4 = netip.MustParseAddr("10.1.0.5")
	dst4 = netip.MustParseAddr("10.2.0.7")
	src6 = netip.MustParseAddr("fd00:1::5")
	dst6 = netip.MustParseAddr("fd00:2::7")
)

// tcpOpts describes a TCP segment for buildTCP.
type tcpOpts struct {
	syn, ack bool
	options  []layers.TCPOption
	payload  []byte
}

func mssOption(mss uint16) layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKindMSS, OptionLength: 4,
		OptionData: []byte{byte(mss >> 8), byte(mss)}}
}

func nop() layers.TCPOption { return layers.TCPOption{OptionType: layers.TCPOptionKindNop} }

// serialize builds a packet from layers with lengths and checksums filled
// in by gopacket.
func serialize(t testing.TB, ls ...gopacket.SerializableLayer) []byte {
	t.Helper()
	buf := gopacket.NewSerializeBuffer()
	opts := gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}
	if err := gopacket.SerializeLayers(buf, opts, ls...); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func ip4Layer(proto layers.IPProtocol, src, dst netip.Addr) *layers.IPv4 {
	return &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: proto, Flags: layers.IPv4DontFragment,
		SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice())}
}

func ip6Layer(next layers.IPProtocol, src, dst netip.Addr) *layers.IPv6 {
	return &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: next,
		SrcIP: net.IP(src.AsSlice()), DstIP: net.IP(dst.AsSlice())}
}

// buildTCP returns an IPv4 (v6 false) or IPv6 packet carrying a TCP segment.
func buildTCP(t testing.TB, v6 bool, o tcpOpts) []byte {
	t.Helper()
	tcp := &layers.TCP{SrcPort: 40000, DstPort: 443, Seq: 1000, Ack: 77, SYN: o.syn, ACK: o.ack,
		Window: 64240, Options: o.options}
	if v6 {
		ip := ip6Layer(layers.IPProtocolTCP, src6, dst6)
		if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
			t.Fatal(err)
		}
		return serialize(t, ip, tcp, gopacket.Payload(o.payload))
	}
	ip := ip4Layer(layers.IPProtocolTCP, src4, dst4)
	if err := tcp.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	return serialize(t, ip, tcp, gopacket.Payload(o.payload))
}

// decode parses b with gopacket, starting at the IP layer.
func decode(b []byte) gopacket.Packet {
	first := layers.LayerTypeIPv4
	if len(b) > 0 && b[0]>>4 == 6 {
		first = layers.LayerTypeIPv6
	}
	return gopacket.NewPacket(b, first, gopacket.DecodeOptions{Lazy: false, NoCopy: true})
}

// tcpChecksumOK recomputes the TCP checksum of the packet independently of
// the package's incremental update: it reports whether the one's
// complement sum over pseudo-header and segment is all ones.
func tcpChecksumOK(b []byte) bool {
	info, err := Parse(b)
	if err != nil || info.Protocol != ProtoTCP {
		return false
	}
	seg := b[info.HeaderLen:info.Length]
	var sum uint32
	add := func(p []byte) {
		for i := 0; i+1 < len(p); i += 2 {
			sum += uint32(p[i])<<8 | uint32(p[i+1])
		}
		if len(p)%2 == 1 {
			sum += uint32(p[len(p)-1]) << 8
		}
	}
	add(info.Src.AsSlice())
	add(info.Dst.AsSlice())
	n := len(seg)
	add([]byte{0, 0, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n), 0, ProtoTCP})
	add(seg)
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	return sum == 0xffff
}

// mssOf returns the MSS option of the TCP segment gopacket decodes from b.
func mssOf(t testing.TB, b []byte) (uint16, bool) {
	t.Helper()
	p := decode(b)
	tl, _ := p.Layer(layers.LayerTypeTCP).(*layers.TCP)
	if tl == nil {
		t.Fatalf("gopacket found no TCP layer: %v", p.ErrorLayer())
	}
	for _, o := range tl.Options {
		if o.OptionType == layers.TCPOptionKindMSS && len(o.OptionData) == 2 {
			return uint16(o.OptionData[0])<<8 | uint16(o.OptionData[1]), true
		}
	}
	return 0, false
}
