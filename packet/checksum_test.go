package packet

import (
	"encoding/binary"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func TestChecksumRFC1071Example(t *testing.T) {
	// RFC 1071 section 3: the words 0001 f203 f4f5 f6f7 sum to ddf2.
	b := []byte{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7}
	if s := Sum(b, 0); s != 0xddf2 {
		t.Fatalf("Sum = %#x, want 0xddf2", s)
	}
	if c := Checksum(b, 0); c != ^uint16(0xddf2) {
		t.Fatalf("Checksum = %#x", c)
	}
	// Odd length pads with zero; splitting at even offsets is equivalent.
	if Sum([]byte{1, 2, 3}, 0) != 0x0402 || Sum(b[4:], Sum(b[:4], 0)) != 0xddf2 {
		t.Fatal("odd-length or split sum wrong")
	}
}

// slowSum is a plain 16-bit-at-a-time reference.
func slowSum(b []byte) uint32 {
	var s uint32
	for i := 0; i < len(b); i += 2 {
		w := uint32(b[i]) << 8
		if i+1 < len(b) {
			w |= uint32(b[i+1])
		}
		s += w
		s = s&0xffff + s>>16
	}
	return s
}

func TestSumMatchesReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for range 2000 {
		b := make([]byte, rng.IntN(200))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		// Compare modulo the two representations of zero.
		got, want := Sum(b, 0)%0xffff, slowSum(b)%0xffff
		if got != want {
			t.Fatalf("Sum(%x) = %#x, want %#x", b, got, want)
		}
	}
}

func TestPseudoHeaderSum(t *testing.T) {
	s4, d4 := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("198.51.100.2")
	ph4 := append(append(s4.AsSlice(), d4.AsSlice()...), 0, ProtoTCP, 0x05, 0xdc)
	if got, want := PseudoHeaderSum(s4, d4, ProtoTCP, 1500), slowSum(ph4); got != want {
		t.Errorf("IPv4 pseudo-header sum %#x, want %#x", got, want)
	}
	s6, d6 := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8:ffff::2")
	ph6 := append(append(s6.AsSlice(), d6.AsSlice()...), 0, 1, 0x11, 0x70, 0, 0, 0, ProtoICMPv6)
	if got, want := PseudoHeaderSum(s6, d6, ProtoICMPv6, 0x11170), slowSum(ph6); got != want {
		t.Errorf("IPv6 pseudo-header sum %#x, want %#x", got, want)
	}
}

func TestUpdateChecksum(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 5000 {
		b := make([]byte, 2+2*rng.IntN(40))
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		binary.BigEndian.PutUint16(b, 0)
		binary.BigEndian.PutUint16(b, Checksum(b, 0))
		w := 2 * (1 + rng.IntN(len(b)/2))
		if w >= len(b) {
			continue
		}
		old := binary.BigEndian.Uint16(b[w:])
		nw := uint16(rng.Uint32())
		binary.BigEndian.PutUint16(b[w:], nw)
		binary.BigEndian.PutUint16(b, UpdateChecksum(binary.BigEndian.Uint16(b), old, nw))
		if Checksum(b, 0) != 0 {
			t.Fatalf("incremental update left an invalid checksum over %x", b)
		}
	}
}
