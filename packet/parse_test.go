package packet

import (
	"encoding/binary"
	"errors"
	"net/netip"
	"testing"

	"github.com/gopacket/gopacket/layers"
)

func TestParse(t *testing.T) {
	syn4 := buildTCP(t, false, tcpOpts{syn: true, options: []layers.TCPOption{mssOption(1460)}})
	syn6 := buildTCP(t, true, tcpOpts{syn: true, payload: []byte("hello")})

	withOptions := append([]byte(nil), syn4...) // IHL 6: one word of IPv4 options
	withOptions = append(withOptions[:20], append([]byte{1, 1, 1, 0}, withOptions[20:]...)...)
	withOptions[0] = 0x46
	binary.BigEndian.PutUint16(withOptions[2:], uint16(len(withOptions)))

	fragment := append([]byte(nil), syn4...)
	binary.BigEndian.PutUint16(fragment[6:], 0x2000|5) // MF, offset 40

	good := []struct {
		name string
		b    []byte
		want Info
	}{
		{"ipv4", syn4, Info{Version: 4, Src: src4, Dst: dst4, Length: len(syn4), Protocol: ProtoTCP, HeaderLen: 20, DontFragment: true}},
		{"ipv4 padded", append(append([]byte(nil), syn4...), 0, 0, 0, 0, 0, 0), Info{Version: 4, Src: src4, Dst: dst4, Length: len(syn4), Protocol: ProtoTCP, HeaderLen: 20, DontFragment: true}},
		{"ipv4 options", withOptions, Info{Version: 4, Src: src4, Dst: dst4, Length: len(withOptions), Protocol: ProtoTCP, HeaderLen: 24, DontFragment: true}},
		{"ipv4 fragment", fragment, Info{Version: 4, Src: src4, Dst: dst4, Length: len(syn4), Protocol: ProtoTCP, HeaderLen: 20, FragmentOffset: 40, MoreFragments: true}},
		{"ipv6", syn6, Info{Version: 6, Src: src6, Dst: dst6, Length: len(syn6), Protocol: ProtoTCP, HeaderLen: 40, DontFragment: true}},
		{"ipv6 padded", append(append([]byte(nil), syn6...), make([]byte, 100)...), Info{Version: 6, Src: src6, Dst: dst6, Length: len(syn6), Protocol: ProtoTCP, HeaderLen: 40, DontFragment: true}},
	}
	for _, c := range good {
		got, err := Parse(c.b)
		if err != nil || got != c.want {
			t.Errorf("%s: Parse = %+v, %v; want %+v", c.name, got, err, c.want)
		}
		if d, ok := Destination(c.b); !ok || d != c.want.Dst {
			t.Errorf("%s: Destination = %v, %v; want %v", c.name, d, ok, c.want.Dst)
		}
	}

	mod := func(b []byte, f func([]byte)) []byte {
		b = append([]byte(nil), b...)
		f(b)
		return b
	}
	bad := []struct {
		name   string
		b      []byte
		want   error
		destOK bool
	}{
		{"empty", nil, ErrTooShort, false},
		{"ipv4 short", syn4[:19], ErrTooShort, false},
		{"ipv6 short", syn6[:39], ErrTooShort, false},
		{"version 0", mod(syn4, func(b []byte) { b[0] = 0x05 }), ErrBadVersion, false},
		{"version 5", mod(syn6, func(b []byte) { b[0] = 0x50 }), ErrBadVersion, false},
		{"ihl 4", mod(syn4, func(b []byte) { b[0] = 0x44 }), ErrBadHeaderLen, true},
		{"ihl 0", mod(syn4, func(b []byte) { b[0] = 0x40 }), ErrBadHeaderLen, true},
		{"ihl past buffer", mod(syn4[:24], func(b []byte) { b[0] = 0x47 }), ErrTooShort, true},
		{"total below header", mod(syn4, func(b []byte) { binary.BigEndian.PutUint16(b[2:], 19) }), ErrBadLength, true},
		{"total past buffer", syn4[:len(syn4)-1], ErrBadLength, true},
		{"ipv6 payload past buffer", syn6[:len(syn6)-1], ErrBadLength, true},
	}
	for _, c := range bad {
		info, err := Parse(c.b)
		if !errors.Is(err, c.want) || info != (Info{}) {
			t.Errorf("%s: Parse = %+v, %v; want %v", c.name, info, err, c.want)
		}
		if _, ok := Destination(c.b); ok != c.destOK {
			t.Errorf("%s: Destination ok = %v, want %v", c.name, ok, c.destOK)
		}
	}
}

func TestParseAllocs(t *testing.T) {
	b := buildTCP(t, true, tcpOpts{syn: true})
	var sink netip.Addr
	allocs := testing.AllocsPerRun(100, func() {
		info, _ := Parse(b)
		d, _ := Destination(b)
		sink = info.Src
		sink = d
	})
	_ = sink
	if allocs != 0 {
		t.Fatalf("Parse/Destination allocate %v times", allocs)
	}
}
