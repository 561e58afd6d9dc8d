package packet

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"testing"
)

// FuzzParse checks that Parse and Destination never panic and that what
// Parse accepts is self-consistent.
func FuzzParse(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 20, 0, 0, 0x40, 0, 64, 6, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2})
	f.Fuzz(func(t *testing.T, b []byte) {
		info, err := Parse(b)
		d, dok := Destination(b)
		if err != nil {
			if info != (Info{}) {
				t.Fatalf("Parse returned %+v with error %v", info, err)
			}
			return
		}
		if info.Version != 4 && info.Version != 6 {
			t.Fatalf("version %d", info.Version)
		}
		if info.HeaderLen > info.Length || info.Length > len(b) || info.HeaderLen < IPv4HeaderLen {
			t.Fatalf("inconsistent lengths %+v for %d bytes", info, len(b))
		}
		if !dok || d != info.Dst || !info.Src.IsValid() {
			t.Fatalf("Destination = %v, %v; Parse says %v", d, dok, info.Dst)
		}
	})
}

// FuzzClampMSS checks that ClampMSS never panics, changes nothing when it
// reports no change, keeps a parseable packet parseable, keeps a valid TCP
// checksum valid, and never leaves an MSS above the limit.
func FuzzClampMSS(f *testing.F) {
	f.Add([]byte{0x45}, uint16(1200))
	f.Fuzz(func(t *testing.T, b []byte, mss uint16) {
		before := append([]byte(nil), b...)
		_, perr := Parse(b)
		sumOK := tcpChecksumOK(b)
		changed := ClampMSS(b, mss)
		if !changed {
			if !bytes.Equal(b, before) {
				t.Fatal("packet modified without reporting a change")
			}
			return
		}
		if perr != nil {
			t.Fatalf("changed a packet Parse rejects: %v", perr)
		}
		if _, err := Parse(b); err != nil {
			t.Fatalf("Parse fails after clamping: %v", err)
		}
		if sumOK && !tcpChecksumOK(b) {
			t.Fatal("valid TCP checksum became invalid")
		}
		if diff := countDiff(b, before); diff > 4 {
			t.Fatalf("%d bytes changed, want at most 4 (MSS and checksum)", diff)
		}
		if ClampMSS(b, mss) {
			t.Fatal("second clamp changed the packet again")
		}
	})
}

func countDiff(a, b []byte) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// FuzzICMPTooBig checks that ICMPTooBig never panics and that whatever it
// writes parses, fits, carries valid checksums, answers only non-error
// packets and quotes the start of the original.
func FuzzICMPTooBig(f *testing.F) {
	f.Add([]byte{0x45}, 1400, false, uint16(1500))
	f.Fuzz(func(t *testing.T, orig []byte, mtu int, v6 bool, dstLen uint16) {
		src := netip.MustParseAddr("10.255.0.1")
		if v6 {
			src = netip.MustParseAddr("fd00:ff::1")
		}
		origCopy := append([]byte(nil), orig...)
		dst := make([]byte, dstLen)
		n := ICMPTooBig(dst, orig, src, mtu)
		if !bytes.Equal(orig, origCopy) {
			t.Fatal("orig modified")
		}
		if n == 0 {
			return
		}
		if n > len(dst) {
			t.Fatalf("n = %d beyond dst of %d", n, len(dst))
		}
		oi, err := Parse(orig)
		if err != nil {
			t.Fatalf("answered a packet Parse rejects: %v", err)
		}
		msg := dst[:n]
		info, err := Parse(msg)
		if err != nil || info.Length != n || info.Dst != oi.Src || info.Src != src {
			t.Fatalf("output does not parse as addressed: %+v, %v", info, err)
		}
		q := msg[info.HeaderLen+8:]
		if !bytes.Equal(q, orig[:len(q)]) || len(q) < min(oi.Length, oi.HeaderLen+8) {
			t.Fatalf("bad quote of %d bytes", len(q))
		}
		icmp := msg[info.HeaderLen:]
		switch info.Version {
		case 4:
			if n > 576 || Checksum(msg[:20], 0) != 0 || Checksum(icmp, 0) != 0 ||
				icmp[0] != 3 || icmp[1] != 4 || int(binary.BigEndian.Uint16(icmp[6:])) != mtu {
				t.Fatalf("bad ICMPv4 message % x", msg[:28])
			}
			if oi.Protocol == ProtoICMP && !isICMP4Query(orig, &oi) {
				t.Fatal("answered an ICMPv4 error")
			}
		case 6:
			ph := PseudoHeaderSum(info.Src, info.Dst, ProtoICMPv6, len(icmp))
			if n > 1280 || Checksum(icmp, ph) != 0 || icmp[0] != 2 || int(binary.BigEndian.Uint32(icmp[4:])) != mtu {
				t.Fatalf("bad ICMPv6 message % x", msg[:48])
			}
			if oi.Protocol == ProtoICMPv6 && (oi.Length <= 40 || orig[40] < 128) {
				t.Fatal("answered an ICMPv6 error")
			}
		}
	})
}
