package fq

import (
	"encoding/binary"
	"testing"

	"github.com/bridgehead/bridgehead/packet"
)

// ipv4 is a 20-byte IPv4 header with tos and a valid checksum, plus 8
// bytes of payload.
func ipv4(tos byte) []byte {
	b := make([]byte, 28)
	b[0], b[1] = 0x45, tos
	binary.BigEndian.PutUint16(b[2:], 28)
	b[8], b[9] = 64, 17
	copy(b[12:], []byte{10, 244, 1, 10})
	copy(b[16:], []byte{10, 245, 1, 10})
	binary.BigEndian.PutUint16(b[10:], packet.Checksum(b[:20], 0))
	return b
}

func ipv6(tc byte) []byte {
	b := make([]byte, 48)
	b[0], b[1] = 0x60|tc>>4, tc<<4
	b[6], b[7] = 17, 64
	return b
}

func TestMarkCE(t *testing.T) {
	for _, c := range []struct {
		name     string
		pkt      []byte
		ect      bool
		marked   bool
		wantTOS  byte // IPv4 TOS or IPv6 traffic class after MarkCE
		traffic6 bool
	}{
		{name: "v4 not-ECT", pkt: ipv4(0x00), wantTOS: 0x00},
		{name: "v4 not-ECT with DSCP", pkt: ipv4(0xb8), wantTOS: 0xb8},
		{name: "v4 ECT(0)", pkt: ipv4(0x02), ect: true, marked: true, wantTOS: 0x03},
		{name: "v4 ECT(1) with DSCP", pkt: ipv4(0xb9), ect: true, marked: true, wantTOS: 0xbb},
		{name: "v4 CE stays", pkt: ipv4(0x03), ect: true, marked: true, wantTOS: 0x03},
		{name: "v6 not-ECT", pkt: ipv6(0x00), wantTOS: 0x00, traffic6: true},
		{name: "v6 ECT(0) with DSCP", pkt: ipv6(0xba), ect: true, marked: true, wantTOS: 0xbb, traffic6: true},
		{name: "v6 ECT(1)", pkt: ipv6(0x01), ect: true, marked: true, wantTOS: 0x03, traffic6: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			if got := ECT(c.pkt); got != c.ect {
				t.Errorf("ECT = %v, want %v", got, c.ect)
			}
			if got := MarkCE(c.pkt); got != c.marked {
				t.Errorf("MarkCE = %v, want %v", got, c.marked)
			}
			tos := c.pkt[1]
			if c.traffic6 {
				tos = c.pkt[0]<<4 | c.pkt[1]>>4
				if c.pkt[0]>>4 != 6 {
					t.Errorf("version changed: %#x", c.pkt[0])
				}
			} else if packet.Checksum(c.pkt[:20], 0) != 0 {
				t.Errorf("IPv4 header checksum wrong after MarkCE")
			}
			if tos != c.wantTOS {
				t.Errorf("TOS %#x, want %#x", tos, c.wantTOS)
			}
		})
	}
}

func TestECTShortOrOther(t *testing.T) {
	for _, pkt := range [][]byte{nil, {0x45}, ipv4(2)[:19], ipv6(2)[:39], {0x52, 0x03, 0, 0}} {
		if ECT(pkt) || MarkCE(pkt) {
			t.Errorf("%x: ECN-capable", pkt)
		}
	}
}

func TestMarkCEAllocs(t *testing.T) {
	p := ipv4(2)
	if n := testing.AllocsPerRun(100, func() { p[1] = 2; MarkCE(p) }); n != 0 {
		t.Errorf("%v allocations", n)
	}
}
