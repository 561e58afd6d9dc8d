package packet

import (
	"encoding/binary"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

func BenchmarkParse(b *testing.B) {
	p := bigTCP(b, false, 1400)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Parse(p); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkDestination(b *testing.B) {
	p := bigTCP(b, true, 1400)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := Destination(p); !ok {
			b.Fatal("no destination")
		}
	}
}

func BenchmarkClampMSS(b *testing.B) {
	sackOK := layers.TCPOption{OptionType: layers.TCPOptionKindSACKPermitted, OptionLength: 2}
	ts := layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: make([]byte, 8)}
	wscale := layers.TCPOption{OptionType: layers.TCPOptionKindWindowScale, OptionLength: 3, OptionData: []byte{7}}
	// A typical Linux SYN: MSS, SACK permitted, timestamps, NOP, window scale.
	p := buildTCP(b, false, tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460), sackOK, ts, nop(), wscale}})
	b.ReportAllocs()
	for b.Loop() {
		binary.BigEndian.PutUint16(p[42:], 1460) // undo the clamp; the checksum drift is irrelevant here
		if !ClampMSS(p, 1360) {
			b.Fatal("not clamped")
		}
	}
}

func BenchmarkICMPTooBig(b *testing.B) {
	for _, v6 := range []bool{false, true} {
		name := map[bool]string{false: "v4", true: "v6"}[v6]
		b.Run(name, func(b *testing.B) {
			p := bigTCP(b, v6, 1400)
			src := router4
			if v6 {
				src = router6
			}
			dst := make([]byte, 1500)
			b.ReportAllocs()
			for b.Loop() {
				if ICMPTooBig(dst, p, src, 1280) == 0 {
					b.Fatal("no message")
				}
			}
		})
	}
}
