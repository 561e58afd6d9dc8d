package ping

import (
	"testing"

	"github.com/bridgehead/bridgehead/router/packet"
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
