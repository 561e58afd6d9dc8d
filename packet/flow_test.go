package packet

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

func udpPacket(t testing.TB, v6 bool, sport, dport uint16, payload []byte) []byte {
	t.Helper()
	udp := &layers.UDP{SrcPort: layers.UDPPort(sport), DstPort: layers.UDPPort(dport)}
	if v6 {
		ip := ip6Layer(layers.IPProtocolUDP, src6, dst6)
		udp.SetNetworkLayerForChecksum(ip)
		return serialize(t, ip, udp, gopacket.Payload(payload))
	}
	ip := ip4Layer(layers.IPProtocolUDP, src4, dst4)
	udp.SetNetworkLayerForChecksum(ip)
	return serialize(t, ip, udp, gopacket.Payload(payload))
}

func icmp4Packet(t testing.TB, id uint16) []byte {
	t.Helper()
	return serialize(t, ip4Layer(layers.IPProtocolICMPv4, src4, dst4),
		&layers.ICMPv4{TypeCode: layers.CreateICMPv4TypeCode(8, 0), Id: id, Seq: 1}, gopacket.Payload([]byte("ping")))
}

// fragment4 turns an IPv4 packet into a fragment with the given offset (in
// 8-byte units) and MF bit, keeping everything else.
func fragment4(b []byte, offset uint16, more bool) []byte {
	c := append([]byte(nil), b...)
	v := offset & 0x1fff
	if more {
		v |= 0x2000
	}
	binary.BigEndian.PutUint16(c[6:8], v)
	return c
}

// fragment6 inserts an IPv6 fragment header (offset in 8-byte units, M
// bit, identification) after the fixed header of b.
func fragment6(b []byte, offset uint16, more bool, id uint32) []byte {
	c := append([]byte(nil), b[:40]...)
	fh := make([]byte, 8)
	fh[0] = c[6]
	v := offset << 3
	if more {
		v |= 1
	}
	binary.BigEndian.PutUint16(fh[2:4], v)
	binary.BigEndian.PutUint32(fh[4:8], id)
	c[6] = 44
	c = append(append(c, fh...), b[40:]...)
	binary.BigEndian.PutUint16(c[4:6], uint16(len(c)-40))
	return c
}

// TestFlowHashFragment: fragments of one datagram share a key that other
// datagrams do not, and say which fragment they are.
func TestFlowHashFragment(t *testing.T) {
	const seed = 0x1234
	udp4 := udpPacket(t, false, 5000, 53, make([]byte, 64))
	udp4b := udpPacket(t, false, 5001, 53, make([]byte, 64))
	udp6 := udpPacket(t, true, 5000, 53, make([]byte, 64))
	id4 := func(b []byte, id uint16) []byte { binary.BigEndian.PutUint16(b[4:6], id); return b }
	for _, c := range []struct {
		name         string
		first, later []byte
		other        []byte // a fragment of another datagram
	}{
		{"ipv4", fragment4(id4(udp4, 7), 0, true), fragment4(id4(udp4b, 7), 10, false), fragment4(id4(udp4, 8), 10, false)},
		{"ipv6", fragment6(udp6, 0, true, 7), fragment6(udp6, 10, false, 7), fragment6(udp6, 10, false, 8)},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, k1, f1, ok1 := FlowHashFragment(c.first, seed)
			_, k2, f2, ok2 := FlowHashFragment(c.later, seed)
			_, k3, _, _ := FlowHashFragment(c.other, seed)
			if !ok1 || !ok2 || f1 != FirstFragment || f2 != LaterFragment {
				t.Fatalf("kinds %v %v (ok %v %v), want first and later", f1, f2, ok1, ok2)
			}
			if k1 == 0 || k1 != k2 {
				t.Errorf("keys %x and %x, want equal and not 0", k1, k2)
			}
			if k3 == k1 {
				t.Errorf("another datagram has the same key %x", k3)
			}
		})
	}
	if _, k, f, _ := FlowHashFragment(udp4, seed); k != 0 || f != NotFragment {
		t.Errorf("whole datagram: key %x kind %v", k, f)
	}
}

func TestFlowHash(t *testing.T) {
	const seed = 0x1234
	h := func(b []byte) uint64 {
		t.Helper()
		v, ok := FlowHash(b, seed)
		if !ok {
			t.Fatalf("FlowHash refused %x", b)
		}
		return v
	}
	tcpA := buildTCP(t, false, tcpOpts{ack: true, payload: []byte("one")})
	tcpA2 := buildTCP(t, false, tcpOpts{ack: true, payload: bytes.Repeat([]byte("x"), 900)})
	udp1 := udpPacket(t, false, 5000, 53, []byte("a"))
	udp1b := udpPacket(t, false, 5000, 53, []byte("a different payload"))
	udp2 := udpPacket(t, false, 5001, 53, []byte("a"))
	udp6a := udpPacket(t, true, 5000, 53, []byte("a"))
	udp6b := udpPacket(t, true, 5001, 53, []byte("a"))
	ping1, ping2 := icmp4Packet(t, 1), icmp4Packet(t, 2)

	same := []struct {
		name string
		a, b []byte
	}{
		{"tcp segments of one connection", tcpA, tcpA2},
		{"udp datagrams of one flow", udp1, udp1b},
		{"icmp: 3-tuple, ids ignored", ping1, ping2},
		{"first fragment and whole datagram", fragment4(udp1, 0, true), udp1},
		{"ipv6 first fragment and whole datagram", fragment6(udp6a, 0, true, 9), udp6a},
		{"ipv6 atomic fragment and whole datagram", fragment6(udp6a, 0, false, 9), udp6a},
		{"trailing bytes ignored", udp1, append(append([]byte(nil), udp1...), 1, 2, 3)},
	}
	for _, c := range same {
		if h(c.a) != h(c.b) {
			t.Errorf("%s: hashes differ", c.name)
		}
	}
	differ := []struct {
		name string
		a, b []byte
	}{
		{"udp source port", udp1, udp2},
		{"ipv6 udp source port", udp6a, udp6b},
		{"protocol", udp1, tcpA},
		{"family", udp1, udp6a},
	}
	for _, c := range differ {
		if h(c.a) == h(c.b) {
			t.Errorf("%s: hashes equal", c.name)
		}
	}
	if a, _ := FlowHash(udp1, 1); a == h(udp1) {
		t.Error("seed does not change the hash")
	}
	for _, bad := range [][]byte{nil, {0x45}, {0x60, 0, 0}, {0x10, 0, 0, 0}, make([]byte, 40)} {
		if _, ok := FlowHash(bad, seed); ok {
			t.Errorf("FlowHash accepted %x", bad)
		}
	}
}

// TestFlowHashSpread checks that source ports spread evenly over two
// buckets: rendezvous hashing over two gateways relies on it.
func TestFlowHashSpread(t *testing.T) {
	n := [2]int{}
	for port := uint16(1000); port < 3000; port++ {
		h, _ := FlowHash(udpPacket(t, false, port, 53, nil), 7)
		if Mix(h, 1) > Mix(h, 2) {
			n[0]++
		} else {
			n[1]++
		}
	}
	if n[0] < 900 || n[1] < 900 {
		t.Errorf("2000 flows split %d/%d over two buckets", n[0], n[1])
	}
}

func FuzzFlowHash(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2, 0x13, 0x88, 0, 53})
	f.Add(fragment6(append([]byte{0x60}, make([]byte, 47)...), 0, true, 1)) // IPv6 first fragment
	f.Fuzz(func(t *testing.T, b []byte) {
		h, key, frag, ok := FlowHashFragment(b, 9)
		if (key == 0) != (frag == NotFragment) || !ok && frag != NotFragment {
			t.Fatalf("key %x with kind %v (ok %v)", key, frag, ok)
		}
		if h1, _ := FlowHash(b, 9); h1 != h {
			t.Fatalf("FlowHash %x, FlowHashFragment %x", h1, h)
		}
		h1, ok1 := FlowHash(b, 9)
		if len(b) < 64 {
			return // shorter buffers may gain ports with one more byte
		}
		h2, ok2 := FlowHash(append(append([]byte(nil), b...), 0xff), 9)
		if ok1 != ok2 || h1 != h2 {
			t.Fatalf("a trailing byte changed the result: %v %x / %v %x", ok1, h1, ok2, h2)
		}
	})
}

func BenchmarkFlowHash(b *testing.B) {
	pkt := udpPacket(b, false, 5000, 53, make([]byte, 1200))
	b.ReportAllocs()
	var sink uint64
	for b.Loop() {
		h, _ := FlowHash(pkt, 3)
		sink += h
	}
	_ = sink
}
