package steer

import (
	"encoding/binary"
	"strings"
	"testing"
	"time"
)

// v4 is an IPv4 packet of size bytes (at least 20) from 10.0.0.1 to
// 10.0.0.2 with protocol proto and, if it has room, ports (source << 16 |
// destination) after the header.
func v4(proto byte, ports uint32, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x45
	binary.BigEndian.PutUint16(b[2:], uint16(size))
	b[8], b[9] = 64, proto
	copy(b[12:], []byte{10, 0, 0, 1, 10, 0, 0, 2})
	if size >= 24 {
		binary.BigEndian.PutUint32(b[20:], ports)
	}
	return b
}

// v6 is an IPv6 packet of size bytes (at least 40) from 2001:db8::1 to
// 2001:db8::2 with next header nh and, if it has room, ports after the
// header.
func v6(nh byte, ports uint32, size int) []byte {
	b := make([]byte, size)
	b[0] = 0x60
	binary.BigEndian.PutUint16(b[4:], uint16(size-40))
	b[6], b[7] = nh, 64
	b[8], b[9], b[23] = 0x20, 0x01, 1
	b[24], b[25], b[39] = 0x20, 0x01, 2
	if size >= 44 {
		binary.BigEndian.PutUint32(b[40:], ports)
	}
	return b
}

// with returns a copy of b changed by f.
func with(b []byte, f func([]byte)) []byte {
	c := append([]byte(nil), b...)
	f(c)
	return c
}

// swap4 and swap6 turn a packet into its reply's header: addresses and
// ports swapped.
func swap4(b []byte) {
	for i := range 4 {
		b[12+i], b[16+i] = b[16+i], b[12+i]
	}
	b[20], b[21], b[22], b[23] = b[22], b[23], b[20], b[21]
}

func swap6(b []byte) {
	for i := range 16 {
		b[8+i], b[24+i] = b[24+i], b[8+i]
	}
	b[40], b[41], b[42], b[43] = b[42], b[43], b[40], b[41]
}

// TestReferenceKey checks the reference against the flow key of the
// brief: which bytes of a packet make its flow, and which do not.
func TestReferenceKey(t *testing.T) {
	ports := func(off int) func([]byte) { return func(b []byte) { b[off+1] ^= 0x55 } }
	for _, tc := range []struct {
		name     string
		pkt      []byte
		change   func([]byte)
		sameFlow bool
	}{
		{"v4 TCP ports", v4(6, 0x10002000, 60), ports(20), false},
		{"v4 reply (addresses and ports swapped)", v4(6, 0x10002000, 60), swap4, true},
		{"v6 reply (addresses and ports swapped)", v6(17, 0x10002000, 60), swap6, true},
		{"v4 UDP ports", v4(17, 0x10002000, 60), ports(20), false},
		{"v4 SCTP ports", v4(132, 0x10002000, 60), ports(20), false},
		{"v4 UDP-Lite ports", v4(136, 0x10002000, 60), ports(20), false},
		{"v4 UDP source", v4(17, 0x10002000, 60), func(b []byte) { b[15] = 9 }, false},
		{"v4 UDP destination", v4(17, 0x10002000, 60), func(b []byte) { b[19] = 9 }, false},
		{"v4 protocol", v4(17, 0x10002000, 60), func(b []byte) { b[9] = 6 }, false},
		{"v4 TTL, ID, checksum, payload", v4(17, 0x10002000, 60), func(b []byte) { b[8], b[4], b[10], b[30] = 1, 7, 7, 7 }, true},
		{"v4 ICMP bytes after header", v4(1, 0x08000000, 60), ports(20), true},
		{"v4 GRE bytes after header", v4(47, 0, 60), ports(20), true},
		{"v4 DF is not a fragment", with(v4(17, 0x10002000, 60), func(b []byte) { b[6] = 0x40 }), ports(20), false},
		{"v4 first fragment", with(v4(17, 0x10002000, 60), func(b []byte) { b[6] = 0x20 }), ports(20), true},
		{"v4 later fragment", with(v4(17, 0x10002000, 60), func(b []byte) { b[7] = 0xb9 }), ports(20), true},
		{"v4 IHL 6: ports after options", with(v4(17, 0, 60), func(b []byte) { b[0] = 0x46 }), ports(24), false},
		{"v4 IHL 6: options are not ports", with(v4(17, 0, 60), func(b []byte) { b[0] = 0x46 }), ports(20), true},
		{"v4 IHL 15 beyond the packet", with(v4(17, 0, 60), func(b []byte) { b[0] = 0x4f }), ports(56), true},
		{"v4 IHL 4: no ports", with(v4(17, 0, 60), func(b []byte) { b[0] = 0x44 }), ports(20), true},
		{"v4 header only", v4(17, 0, 20), func(b []byte) { b[2] = 1 }, true},
		{"v6 TCP ports", v6(6, 0x10002000, 80), ports(40), false},
		{"v6 UDP ports", v6(17, 0x10002000, 80), ports(40), false},
		{"v6 source", v6(17, 0x10002000, 80), func(b []byte) { b[10] = 9 }, false},
		{"v6 destination", v6(17, 0x10002000, 80), func(b []byte) { b[30] = 9 }, false},
		{"v6 next header", v6(17, 0x10002000, 80), func(b []byte) { b[6] = 6 }, false},
		{"v6 flow label, hop limit, payload", v6(17, 0x10002000, 80), func(b []byte) { b[1], b[7], b[60] = 7, 1, 7 }, true},
		{"v6 hop-by-hop header: no ports", v6(0, 0x11000000, 80), ports(40), true},
		{"v6 fragment header: no ports", v6(44, 0x11000000, 80), ports(40), true},
		{"v6 ICMPv6", v6(58, 0x80000000, 80), ports(40), true},
		{"v6 TCP header only", v6(6, 0, 40), func(b []byte) { b[5] = 1 }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h1, ok1 := LaneHash(tc.pkt)
			h2, ok2 := LaneHash(with(tc.pkt, tc.change))
			if !ok1 || !ok2 {
				t.Fatalf("not parsed: %v %v", ok1, ok2)
			}
			if (h1 == h2) != tc.sameFlow {
				t.Errorf("hash %#x -> %#x, want the same flow: %v", h1, h2, tc.sameFlow)
			}
		})
	}
	for _, tc := range []struct {
		name string
		pkt  []byte
	}{
		{"empty", nil},
		{"v4 short", v4(17, 0, 24)[:19]},
		{"v6 short", v6(17, 0, 44)[:39]},
		{"version 5", with(v4(17, 0, 60), func(b []byte) { b[0] = 0x55 })},
		{"version 0", make([]byte, 60)},
	} {
		if _, ok := LaneHash(tc.pkt); ok {
			t.Errorf("%s: parsed", tc.name)
		}
	}
}

func TestConfig(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    Config
		err  string // a substring; "" for none
	}{
		{"defaults", Config{Queues: 1}, ""},
		{"most queues", Config{Queues: MaxQueues}, ""},
		{"no queues", Config{}, "Queues 0"},
		{"negative queues", Config{Queues: -1}, "Queues -1"},
		{"too many queues", Config{Queues: MaxQueues + 1}, "Queues 256"},
		{"negative rate", Config{Queues: 2, Rate: -1}, "Rate -1"},
		{"huge burst", Config{Queues: 2, Burst: 1 << 31}, "Burst 2147483648"},
		{"negative total rate", Config{Queues: 2, TotalRate: -5}, "TotalRate -5"},
		{"negative packet cost", Config{Queues: 2, PacketCost: -1}, "PacketCost -1"},
		{"huge packet cost", Config{Queues: 2, PacketCost: 1 << 21}, "PacketCost 2097152"},
		{"huge total burst", Config{Queues: 2, TotalBurst: 1 << 40}, "TotalBurst"},
		{"negative quiet", Config{Queues: 2, Quiet: -time.Second}, "Quiet -1s"},
		{"all set", Config{Queues: 4, Rate: 1, Burst: 1, Quiet: time.Nanosecond, TotalRate: maxBytes, TotalBurst: maxBytes}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.c.withDefaults()
			switch {
			case tc.err == "" && err != nil:
				t.Fatal(err)
			case tc.err != "" && err == nil:
				t.Fatalf("no error, want one with %q", tc.err)
			case tc.err != "" && !strings.Contains(err.Error(), tc.err):
				t.Fatalf("error %q, want one with %q", err, tc.err)
			case err != nil:
				return
			}
			for name, v := range map[string]int{"Rate": got.Rate, "Burst": got.Burst, "TotalRate": got.TotalRate, "TotalBurst": got.TotalBurst, "Quiet": int(got.Quiet)} {
				if v <= 0 {
					t.Errorf("%s %d after defaults", name, v)
				}
			}
		})
	}
	c, _ := Config{Queues: 1}.withDefaults()
	want := Config{Queues: 1, Rate: DefaultRate, Burst: DefaultBurst, Quiet: DefaultQuiet, TotalRate: DefaultTotalRate, TotalBurst: DefaultTotalBurst}
	if c != want {
		t.Errorf("defaults %+v, want %+v", c, want)
	}
}

// TestLaneHashAllocs: the router hashes every packet it seals with
// steering on, so LaneHash allocates nothing.
func TestLaneHashAllocs(t *testing.T) {
	for _, pkt := range [][]byte{v4(6, 0x10002000, 60), v6(17, 0x10002000, 60)} {
		if n := testing.AllocsPerRun(100, func() { _, _ = LaneHash(pkt) }); n != 0 {
			t.Errorf("%.1f allocations per LaneHash, want 0", n)
		}
	}
}
