package ping

import (
	"testing"

	"github.com/bridgehead/bridgehead/packet"
)

func TestEchoRequestChecksum(t *testing.T) {
	m := EchoRequest(0x1234, 7, 56)
	if len(m) != 64 || m[0] != 8 || m[1] != 0 {
		t.Fatalf("header % x", m[:8])
	}
	// A correct checksum makes the sum over the whole message zero.
	if c := packet.Checksum(m, 0); c != 0 {
		t.Errorf("checksum over message = %#x, want 0", c)
	}
	// RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
	if c := packet.Checksum([]byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}, 0); c != ^uint16(0xddf2) {
		t.Errorf("RFC 1071 example: %#x", c)
	}
	if c := packet.Checksum([]byte{0xff}, 0); c != ^uint16(0xff00) {
		t.Errorf("odd length: %#x", c)
	}
}

// TestICMPOf: the IPv4 header is skipped by its length; short and
// non-IPv4 packets are refused.
func TestICMPOf(t *testing.T) {
	hdr := func(ihl byte, n int) []byte {
		b := make([]byte, n)
		b[0] = 0x40 | ihl
		return b
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
		want int // length of the ICMP message, -1: refused
	}{
		{"20-byte header", hdr(5, 28), 8},
		{"24-byte header", hdr(6, 32), 8},
		{"header only", hdr(5, 20), 0},
		{"short", hdr(5, 19), -1},
		{"ihl below 5", hdr(4, 28), -1},
		{"ihl past the end", hdr(15, 40), -1},
		{"IPv6", append([]byte{0x60}, make([]byte, 40)...), -1},
	} {
		msg, ok := icmpOf(tc.pkt)
		if got := map[bool]int{true: len(msg), false: -1}[ok]; got != tc.want {
			t.Errorf("%s: %d, want %d", tc.name, got, tc.want)
		}
	}
}

func FuzzICMPOf(f *testing.F) {
	f.Add([]byte{0x45, 0, 0, 28})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		if msg, ok := icmpOf(pkt); ok && len(msg) > len(pkt)-20 {
			t.Fatalf("%d-byte message from a %d-byte packet", len(msg), len(pkt))
		}
	})
}
