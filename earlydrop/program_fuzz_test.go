//go:build linux

package earlydrop

import (
	"encoding/binary"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// reference is the filter's decision written plainly in Go, from the
// router's outside path (router.receiveBatch, openTransport,
// queueHandshake): what it drops and why, and what it passes.
// A blocked source's initiations and responses are dropped too, unless it
// is a peer endpoint.
func reference(payload []byte, indexKnown, fromPeer, blocked bool) (pass bool, reason Reason) {
	if len(payload) < 4 {
		return false, ReasonRunt
	}
	switch payload[0] {
	case bhcrypto.MsgInitiation, bhcrypto.MsgResponse:
		size := bhcrypto.InitiationSize
		if payload[0] == bhcrypto.MsgResponse {
			size = bhcrypto.ResponseSize
		}
		if len(payload) != size {
			return false, ReasonBadSize
		}
		if blocked && !fromPeer {
			return false, ReasonBlocked
		}
		return true, 0
	case bhcrypto.MsgCookieReply:
		return len(payload) == bhcrypto.CookieReplySize, ReasonBadSize
	case bhcrypto.MsgTransport, bhcrypto.MsgRelay:
		min := bhcrypto.TransportOverhead
		if payload[0] == bhcrypto.MsgRelay {
			min = bhcrypto.RelayOverhead
		}
		if len(payload) < min {
			return false, ReasonRunt
		}
		// A transport message's byte 1 is its lane byte.
		if payload[2]|payload[3] != 0 || (payload[0] == bhcrypto.MsgRelay && payload[1] != 0) {
			return false, ReasonUnknownType
		}
		if indexKnown || fromPeer {
			return true, 0
		}
		return false, ReasonUnknownIndex
	}
	return false, ReasonUnknownType
}

var (
	fuzzSrc4 = netip.MustParseAddrPort("192.0.2.1:40000")
	fuzzSrc6 = netip.MustParseAddrPort("[2001:db8::1]:40000")
	fuzzDst4 = netip.MustParseAddr("192.0.2.2")
	fuzzDst6 = netip.MustParseAddr("2001:db8::2")
)

// frame wraps payload in Ethernet, IP and UDP headers from src, as
// BPF_PROG_TEST_RUN takes it. It returns the frame and where the UDP
// header starts once the kernel has pulled the Ethernet header.
func frame(src netip.AddrPort, payload []byte) ([]byte, int32) {
	udpLen := 8 + len(payload)
	var ip []byte
	if src.Addr().Is4() {
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+udpLen))
		ip[8] = 64
		ip[9] = 17
		s, d := src.Addr().As4(), fuzzDst4.As4()
		copy(ip[12:], s[:])
		copy(ip[16:], d[:])
	} else {
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(udpLen))
		ip[6] = 17
		ip[7] = 64
		s, d := src.Addr().As16(), fuzzDst6.As16()
		copy(ip[8:], s[:])
		copy(ip[24:], d[:])
	}
	eth := make([]byte, 14)
	eth[0] = 0x02 // a unicast MAC that is not the test device's
	if src.Addr().Is4() {
		binary.BigEndian.PutUint16(eth[12:], 0x0800)
	} else {
		binary.BigEndian.PutUint16(eth[12:], 0x86DD)
	}
	udp := make([]byte, 8)
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], 51820)
	binary.BigEndian.PutUint16(udp[4:], uint16(udpLen))
	out := append(append(append(eth, ip...), udp...), payload...)
	return out, int32(len(ip))
}

// testFilters loads the program for IPv4 and IPv6 test frames (the UDP
// header after 20 and 40 bytes of IP header).
func testFilters(t testing.TB) map[int32]*Filter {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("loading eBPF needs root; CI runs as root")
		}
		t.Skip("loading eBPF needs root")
	}
	fs := map[int32]*Filter{}
	for _, off := range []int32{20, 40} {
		f, err := load(off)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		fs[off] = f
	}
	return fs
}

// check runs the program on payload and compares it with reference.
func check(t testing.TB, fs map[int32]*Filter, payload []byte, v6, indexKnown, fromPeer, blocked bool) {
	t.Helper()
	src := fuzzSrc4
	if v6 {
		src = fuzzSrc6
	}
	data, off := frame(src, payload)
	f := fs[off]
	var idx uint32
	if len(payload) >= 8 {
		idx = binary.LittleEndian.Uint32(payload[4:8])
	}
	if indexKnown {
		if err := f.AddIndex(idx); err != nil {
			t.Fatal(err)
		}
		defer f.RemoveIndex(idx)
	}
	var eps []netip.AddrPort
	if fromPeer {
		eps = []netip.AddrPort{src}
	} else {
		// Another port of the same host is not the peer.
		eps = []netip.AddrPort{netip.AddrPortFrom(src.Addr(), src.Port()+1)}
	}
	if err := f.SetEndpoints(eps); err != nil {
		t.Fatal(err)
	}
	blockFor := time.Duration(0)
	if blocked {
		blockFor = time.Hour
	}
	if err := f.Block(src.Addr(), blockFor); err != nil {
		t.Fatal(err)
	}
	before, err := f.Counts()
	if err != nil {
		t.Fatal(err)
	}
	ret, err := f.prog.Run(&ebpf.RunOptions{Data: data})
	if err != nil {
		t.Fatal(err)
	}
	after, err := f.Counts()
	if err != nil {
		t.Fatal(err)
	}
	// An index known only because the payload is too short to hold one
	// is not known: the reference decides on the payload.
	wantPass, wantReason := reference(payload, indexKnown && len(payload) >= 8, fromPeer, blocked)
	gotPass := ret != 0
	if gotPass != wantPass {
		t.Fatalf("payload %x (v6 %v, index known %v, from peer %v, blocked %v): program passed=%v (ret %#x), reference %v (%s)",
			payload, v6, indexKnown, fromPeer, blocked, gotPass, ret, wantPass, wantReason)
	}
	for r := range NumReasons {
		want := before[r]
		if !wantPass && r == wantReason {
			want++
		}
		if after[r] != want {
			t.Fatalf("payload %x: %s count %d -> %d, want %d", payload, r, before[r], after[r], want)
		}
	}
}

// FuzzProgram checks the eBPF program against reference on arbitrary
// payloads, from IPv4 and IPv6 sources, with the receiver index known or
// not, the source a peer endpoint or not, blocked or not.
func FuzzProgram(f *testing.F) {
	seed := func(typ byte, size int, mod func([]byte)) []byte {
		b := make([]byte, size)
		if size > 0 {
			b[0] = typ
		}
		if mod != nil {
			mod(b)
		}
		return b
	}
	for _, p := range [][]byte{
		{}, {4}, {4, 0, 0}, {1, 0, 0, 0},
		seed(1, bhcrypto.InitiationSize, nil),
		seed(1, bhcrypto.InitiationSize+1, nil),
		seed(2, bhcrypto.ResponseSize, nil),
		seed(3, bhcrypto.CookieReplySize, nil),
		seed(3, bhcrypto.CookieReplySize-1, nil),
		seed(4, bhcrypto.TransportOverhead, nil),
		seed(4, bhcrypto.TransportOverhead-1, nil),
		seed(4, 100, func(b []byte) { b[3] = 1 }),
		seed(4, 100, func(b []byte) { b[1] = 0x9c }),
		seed(4, 1400, func(b []byte) { b[4] = 0x11 }),
		seed(5, bhcrypto.RelayOverhead, nil),
		seed(5, bhcrypto.RelayOverhead-1, nil),
		seed(5, 100, func(b []byte) { b[1] = 1 }),
		seed(9, 100, nil),
	} {
		f.Add(p, uint8(0))
		f.Add(p, uint8(7))
		f.Add(p, uint8(8))
		f.Add(p, uint8(13))
	}
	fs := testFilters(f)
	f.Fuzz(func(t *testing.T, payload []byte, flags uint8) {
		if len(payload) > 1400 {
			payload = payload[:1400]
		}
		check(t, fs, payload, flags&1 != 0, flags&2 != 0, flags&4 != 0, flags&8 != 0)
	})
}
