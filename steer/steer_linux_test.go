//go:build linux

package steer

import (
	"encoding/binary"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
)

// testSeed keys the flow hash in tests, so that reference knows it.
const testSeed = 0x1badcafe

// testLoad loads a program for c (with testSeed unless c has a seed) and
// closes it when the test ends.
func testLoad(t testing.TB, c Config) *Program {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") != "" {
			t.Fatal("loading eBPF needs root; CI runs as root")
		}
		t.Skip("loading eBPF needs root")
	}
	if c.Seed == 0 {
		c.Seed = testSeed
	}
	p, err := Load(c)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// steerTo runs p on the IP packet pkt (BPF_PROG_TEST_RUN) and returns
// the queue it picks. The kernel pulls the Ethernet header in front of
// pkt before it runs the program, so the program sees what it sees on a
// TUN interface: skb data and skb->len from the IP header on. The
// EtherType is IP's if pkt holds an IP header (the kernel refuses to run
// a shorter one as IP), else a local experimental one: the program reads
// the version from the packet, not skb->protocol.
func steerTo(t testing.TB, p *Program, pkt []byte) uint32 {
	t.Helper()
	data := make([]byte, 14, 14+len(pkt))
	data[0] = 0x02
	etherType := uint16(0x88b5)
	switch {
	case len(pkt) >= 20 && pkt[0]>>4 == 4:
		etherType = 0x0800
	case len(pkt) >= 40 && pkt[0]>>4 == 6:
		etherType = 0x86dd
	}
	binary.BigEndian.PutUint16(data[12:], etherType)
	ret, err := p.prog.Run(&ebpf.RunOptions{Data: append(data, pkt...)})
	if err != nil {
		t.Fatal(err)
	}
	return ret
}

// bulkQueue is the queue of pkt's flow when it is bulk.
func bulkQueue(t testing.TB, pkt []byte, n int) uint32 {
	t.Helper()
	h, ok := LaneHash(pkt)
	if !ok {
		t.Fatalf("packet %x: not parsed", pkt)
	}
	return Lane(h) % uint32(n)
}

func bucket(t testing.TB, pkt []byte) uint32 {
	t.Helper()
	h, ok := LaneHash(pkt)
	if !ok {
		t.Fatalf("packet %x: not parsed", pkt)
	}
	return bucketOf(h, testSeed)
}

// distinct returns the first count of the packets mk(0), mk(1), ... whose
// flows have buckets of their own, none of them one of avoid's.
func distinct(t testing.TB, count int, mk func(i int) []byte, avoid ...[]byte) [][]byte {
	t.Helper()
	taken := map[uint32]bool{}
	for _, a := range avoid {
		taken[bucket(t, a)] = true
	}
	var out [][]byte
	for i := 0; len(out) < count; i++ {
		if i > 100*count {
			t.Fatalf("no %d flows with buckets of their own", count)
		}
		pkt := mk(i)
		if b := bucket(t, pkt); !taken[b] {
			taken[b] = true
			out = append(out, pkt)
		}
	}
	return out
}

// udp4 is a UDP packet of flow i (its source port) of size bytes.
func udp4(i, size int) []byte { return v4(17, uint32(40000+i)<<16|53, size) }

// testPackets are the packets the table tests and the fuzz seeds share:
// parsed says whether the program parses them.
func testPackets() []struct {
	name   string
	pkt    []byte
	parsed bool
} {
	return []struct {
		name   string
		pkt    []byte
		parsed bool
	}{
		{"v4 ICMP echo", v4(1, 0x08000000, 84), true},
		{"v4 TCP SYN", v4(6, 0xc0000050, 60), true},
		{"v4 UDP", v4(17, 0xc0000035, 100), true},
		{"v4 SCTP", v4(132, 0xc0000035, 100), true},
		{"v4 UDP-Lite", v4(136, 0xc0000035, 100), true},
		{"v4 UDP first fragment", with(v4(17, 0xc0000035, 1420), func(b []byte) { b[6] = 0x20 }), true},
		{"v4 UDP later fragment", with(v4(17, 0xc0000035, 500), func(b []byte) { b[7] = 0xb9 }), true},
		{"v4 UDP DF", with(v4(17, 0xc0000035, 500), func(b []byte) { b[6] = 0x40 }), true},
		{"v4 UDP with options", with(v4(17, 0, 100), func(b []byte) { b[0], b[24], b[27] = 0x46, 0xc0, 0x35 }), true},
		{"v4 UDP IHL beyond the packet", with(v4(17, 0, 40), func(b []byte) { b[0] = 0x4f }), true},
		{"v4 UDP IHL 4", with(v4(17, 0, 40), func(b []byte) { b[0] = 0x44 }), true},
		{"v4 header only", v4(6, 0, 20), true},
		{"v4 UDP header cut", v4(17, 0xc0000035, 23), true},
		{"v6 TCP", v6(6, 0xc0000050, 80), true},
		{"v6 UDP", v6(17, 0xc0000035, 100), true},
		{"v6 hop-by-hop then UDP", v6(0, 0x11000000, 100), true},
		{"v6 fragment header", v6(44, 0x11000000, 100), true},
		{"v6 ICMPv6", v6(58, 0x80000000, 100), true},
		{"v6 header only", v6(17, 0, 40), true},
		{"v6 UDP header cut", v6(17, 0xc0000035, 43), true},
		{"empty", nil, false},
		{"one byte", []byte{0x45}, false},
		{"v4 short", v4(6, 0, 24)[:19], false},
		{"v6 short", v6(6, 0, 44)[:39], false},
		{"version 5", with(v4(17, 0, 100), func(b []byte) { b[0] = 0x55 }), false},
		{"version 0", make([]byte, 100), false},
		{"garbage", []byte("\xffGET / HTTP/1.1\r\nHost: example.com\r\n\r\n"), false},
	}
}

// TestSteerFirstPacket: the first packet of a small flow goes to the
// express queue, a packet the program cannot parse to queue 0; and with
// Burst 1 (every flow bulk) each goes to its flow's bulk queue, hash %
// n, with the flow key of reference (a prime n makes a wrong key show).
func TestSteerFirstPacket(t *testing.T) {
	const n, many = 3, 251
	bulk := testLoad(t, Config{Queues: many, Burst: 1})
	for _, tc := range testPackets() {
		t.Run(tc.name, func(t *testing.T) {
			sparse := testLoad(t, Config{Queues: n})
			want, wantBulk := uint32(0), uint32(0)
			if tc.parsed {
				want, wantBulk = n, bulkQueue(t, tc.pkt, many)
			}
			if got := steerTo(t, sparse, tc.pkt); got != want {
				t.Errorf("first packet: queue %d, want %d", got, want)
			}
			for range 3 {
				if got := steerTo(t, bulk, tc.pkt); got != wantBulk {
					t.Fatalf("Burst 1: queue %d, want %d", got, wantBulk)
				}
			}
		})
	}
}

// TestSteerBulkFlow: a flow that sends more than Burst at once goes to
// its bulk queue and stays there (Quiet is an hour) for small packets
// too; another flow keeps its own bucket and stays sparse.
func TestSteerBulkFlow(t *testing.T) {
	const n = 3
	for _, tc := range []struct {
		name string
		mk   func(flow, size int) []byte
	}{
		{"v4 UDP", udp4},
		{"v4 ICMP", func(flow, size int) []byte {
			return with(v4(1, 0x08000000, size), func(b []byte) { b[19] = byte(flow) })
		}},
		{"v6 TCP", func(flow, size int) []byte { return v6(6, uint32(50000+flow)<<16|443, size) }},
		{"v4 fragments", func(flow, size int) []byte {
			return with(v4(17, 0, size), func(b []byte) { b[6], b[18] = 0x20, byte(flow) })
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testLoad(t, Config{Queues: n, Quiet: time.Hour})
			a := tc.mk(0, 100)
			aq := bulkQueue(t, a, n)
			if got := steerTo(t, p, a); got != n {
				t.Fatalf("first packet: queue %d, want %d", got, n)
			}
			start := time.Now()
			sparseBytes, big := len(a), tc.mk(0, 1400)
			for i := 0; ; i++ {
				if i == 100 {
					t.Fatalf("%d bytes sent, all sparse", sparseBytes)
				}
				got := steerTo(t, p, big)
				if got == n {
					sparseBytes += len(big)
					continue
				}
				if got != aq {
					t.Fatalf("bulk queue %d, want %d", got, aq)
				}
				break
			}
			elapsed := time.Since(start)
			if min := DefaultBurst - len(big); sparseBytes < min {
				t.Errorf("bulk after %d sparse bytes, want at least %d", sparseBytes, min)
			}
			if max := DefaultBurst + int(elapsed.Seconds()*DefaultRate); sparseBytes > max {
				t.Errorf("bulk after %d sparse bytes in %v, want at most %d", sparseBytes, elapsed, max)
			}
			for i := range 20 {
				if got := steerTo(t, p, a); got != aq {
					t.Fatalf("small packet %d after the burst: queue %d, want bulk %d", i, got, aq)
				}
			}
			b := distinct(t, 1, func(i int) []byte { return tc.mk(1+i, 100) }, a)[0]
			for i := range 5 {
				if got := steerTo(t, p, b); got != n {
					t.Fatalf("another flow's packet %d: queue %d, want %d", i, got, n)
				}
			}
			if got := steerTo(t, p, big); got != aq {
				t.Fatalf("after the other flow: queue %d, want bulk %d", got, aq)
			}
		})
	}
}

// TestSteerPacketCost: with PacketCost each packet books its length plus
// the cost, so a flow of small packets (a bulk flow's ACKs) turns bulk
// after Burst/(size+cost) of them; without it, after Burst/size.
func TestSteerPacketCost(t *testing.T) {
	const n, size = 3, 64
	for _, tc := range []struct {
		cost   int
		lo, hi int // sparse packets before the first bulk one
	}{
		{0, DefaultBurst / size, DefaultBurst/size + 20},
		{1000, DefaultBurst / (size + 1000), DefaultBurst/(size+1000) + 2},
		{DefaultPacketCost, DefaultBurst / (size + DefaultPacketCost), DefaultBurst/(size+DefaultPacketCost) + 2},
	} {
		t.Run(fmt.Sprintf("cost %d", tc.cost), func(t *testing.T) {
			p := testLoad(t, Config{Queues: n, Quiet: time.Hour, PacketCost: tc.cost})
			pkt := udp4(0, size)
			q := bulkQueue(t, pkt, n)
			sparse := 0
			for ; sparse < 1000; sparse++ {
				got := steerTo(t, p, pkt)
				if got == n {
					continue
				}
				if got != q {
					t.Fatalf("queue %d, want express %d or bulk %d", got, n, q)
				}
				break
			}
			if sparse < tc.lo || sparse > tc.hi {
				t.Errorf("%d sparse packets of %d bytes before bulk, want %d to %d", sparse, size, tc.lo, tc.hi)
			}
		})
	}
}

// TestSteerQuiet: a bulk flow stays bulk while it keeps sending and is
// sparse again after Quiet without a packet. Quiet is short here, and the
// test sleeps: a check of behaviour, not of timing (a packet sent less
// than Quiet after the last, as the test measures it, must be bulk).
func TestSteerQuiet(t *testing.T) {
	const n, quiet = 2, 50 * time.Millisecond
	p := testLoad(t, Config{Queues: n, Quiet: quiet})
	small, big := v6(17, 0x11112222, 100), v6(17, 0x11112222, 1400)
	q := bulkQueue(t, small, n)
	for round := range 3 {
		last := time.Now()
		for i := 0; steerTo(t, p, big) == n; i++ {
			if i == 100 {
				t.Fatalf("round %d: never bulk", round)
			}
			last = time.Now()
		}
		for range 5 {
			before := time.Now()
			got := steerTo(t, p, small)
			if time.Since(last) >= quiet {
				t.Logf("round %d: the test was too slow to see the flow stay bulk", round)
				break
			}
			if got != q {
				t.Fatalf("round %d: less than Quiet after the last packet: queue %d, want bulk %d", round, got, q)
			}
			last = before
		}
		time.Sleep(quiet + 10*time.Millisecond)
		if got := steerTo(t, p, small); got != n {
			t.Fatalf("round %d: after Quiet: queue %d, want %d", round, got, n)
		}
	}
}

// TestSteerRefill: a flow's bucket refills at Rate, up to Burst, both
// after the flow turned bulk and was quiet (then it is sparse again with
// what refilled) and while it is still sparse. The bounds come from the
// times the test measures around each packet.
func TestSteerRefill(t *testing.T) {
	const n, rate, burst, size = 2, 1e6, 10000, 1000 // refill time 10 ms
	for _, tc := range []struct {
		name  string
		drain bool // send until bulk first, else one packet
		sleep time.Duration
		quiet time.Duration
	}{
		{"bulk, partial", true, 3 * time.Millisecond, time.Millisecond},
		{"bulk, full", true, 30 * time.Millisecond, time.Millisecond},
		// A first packet counts as a gap of Quiet: an hour fills the
		// bucket.
		{"sparse, capped at Burst", false, 5 * time.Millisecond, time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := testLoad(t, Config{Queues: n, Rate: rate, Burst: burst, Quiet: tc.quiet})
			pkt := v4(6, 0x30003000, size)
			// What the bucket held after the last packet: less than a
			// packet once the flow turned bulk, else Burst less one.
			leftLo, leftHi := 0, size
			if !tc.drain {
				leftLo, leftHi = burst-size, burst-size
			}
			var before, after time.Time
			for i := 0; ; i++ {
				if i == 100 {
					t.Fatal("never bulk")
				}
				before = time.Now()
				got := steerTo(t, p, pkt)
				after = time.Now()
				if got != n || !tc.drain {
					break
				}
			}
			time.Sleep(tc.sleep)
			// Now sparse until the refilled tokens are spent.
			sparse := 0
			var first, last time.Time
			for i := 0; ; i++ {
				if i == 100 {
					t.Fatal("never bulk again")
				}
				start := time.Now()
				if i == 0 {
					first = start
				}
				got := steerTo(t, p, pkt)
				last = time.Now()
				if got != n {
					break
				}
				sparse += size
			}
			// The bucket refilled for the gap and, a little, while the
			// test sent.
			gapMin, gapMax := first.Sub(after).Seconds(), last.Sub(before).Seconds()
			lo := min(burst, leftLo+int(gapMin*rate)) - size
			hi := min(burst, leftHi+int(gapMax*rate)) + int(last.Sub(first).Seconds()*rate)
			t.Logf("%d bytes sparse after %v, want %d..%d", sparse, first.Sub(after), lo, hi)
			if sparse < lo || sparse > hi {
				t.Fatalf("%d bytes sparse after %v quiet, want %d..%d", sparse, first.Sub(after), lo, hi)
			}
		})
	}
}

// TestSteerAggregate: once the express queue's total burst is spent, new
// flows go bulk; a flow the aggregate refused stays bulk even when the
// aggregate has tokens again, so it does not flip between the queues.
func TestSteerAggregate(t *testing.T) {
	const n, size = 4, 100
	t.Run("cap", func(t *testing.T) {
		p := testLoad(t, Config{Queues: n, Quiet: time.Hour, TotalRate: 1, TotalBurst: 10 * size})
		for i, pkt := range distinct(t, 30, func(i int) []byte { return udp4(i, size) }) {
			want := uint32(n)
			if i >= 10 {
				want = bulkQueue(t, pkt, n)
			}
			if got := steerTo(t, p, pkt); got != want {
				t.Fatalf("flow %d: queue %d, want %d", i, got, want)
			}
		}
	})
	t.Run("refused flow stays bulk", func(t *testing.T) {
		const rate = 10000
		p := testLoad(t, Config{Queues: n, Quiet: time.Hour, TotalRate: rate, TotalBurst: 10 * size})
		flows := distinct(t, 40, func(i int) []byte { return udp4(i, size) })
		start := time.Now()
		refused := -1
		for i, pkt := range flows[:30] {
			if steerTo(t, p, pkt) != n {
				refused = i
				break
			}
		}
		refill := int(time.Since(start).Seconds() * rate / size)
		if refused < 10 || refused > 10+refill {
			t.Fatalf("first flow refused: %d, want 10..%d", refused, 10+refill)
		}
		x := flows[refused]
		time.Sleep(50 * time.Millisecond) // 500 bytes of tokens
		if got := steerTo(t, p, flows[30]); got != n {
			t.Fatalf("a new flow after the refill: queue %d, want %d", got, n)
		}
		if got, want := steerTo(t, p, x), bulkQueue(t, x, n); got != want {
			t.Fatalf("the refused flow after the refill: queue %d, want bulk %d", got, want)
		}
	})
	t.Run("concurrent", func(t *testing.T) {
		// Several goroutines (and so CPUs) take the aggregate at once,
		// each packet a flow of its own: never more than its burst.
		const workers, each = 4, 100
		p := testLoad(t, Config{Queues: n, TotalRate: 1, TotalBurst: 100 * size})
		flows := distinct(t, workers*each, func(i int) []byte { return udp4(i, size) })
		var mu sync.Mutex
		var wg sync.WaitGroup
		sparse := 0
		for w := range workers {
			wg.Go(func() {
				k := 0
				for _, pkt := range flows[w*each : (w+1)*each] {
					if steerTo(t, p, pkt) == n {
						k++
					}
				}
				mu.Lock()
				sparse += k
				mu.Unlock()
			})
		}
		wg.Wait()
		// casTries failed exchanges in a row count as short: a few
		// fewer is possible, more never.
		if sparse > 100 || sparse < 95 {
			t.Fatalf("%d packets sparse, want 100", sparse)
		}
	})
}

// FuzzSteer: whatever the packet, the program returns a queue in 0..n
// and never fails; a packet it cannot parse never gets the express queue
// n, and one it can goes to n or to its flow's bulk queue (always the
// bulk queue with Burst 1).
//
// The program reads at most the first 64 bytes (an IPv4 header of 60 and
// the ports) and the length, so the fuzzer varies a head of up to 64
// bytes and pads it with pad zeros: each run is a system call, and Go
// minimizes a long []byte input with a number of runs quadratic in its
// length.
func FuzzSteer(f *testing.F) {
	const maxHead, maxPad = 64, 1500 - 64 // BPF_PROG_TEST_RUN takes about a page
	for _, tc := range testPackets() {
		head := tc.pkt[:min(len(tc.pkt), maxHead)]
		for w := range 4 {
			f.Add(head, uint16(len(tc.pkt)-len(head)), uint8(w))
		}
	}
	progs := []struct {
		p          *Program
		n          uint32
		alwaysBulk bool
	}{
		{testLoad(f, Config{Queues: 3}), 3, false},
		{testLoad(f, Config{Queues: 7, Burst: 1}), 7, true},
		{testLoad(f, Config{Queues: 1, Burst: 2000}), 1, false},
		{testLoad(f, Config{Queues: MaxQueues, TotalBurst: 3000}), MaxQueues, false},
	}
	f.Fuzz(func(t *testing.T, head []byte, pad uint16, which uint8) {
		if len(head) > maxHead {
			t.Skip("the program reads 64 bytes at most; pad makes the packet longer")
		}
		pkt := append(head[:len(head):len(head)], make([]byte, int(pad)%(maxPad+1))...)
		pr := progs[int(which)%len(progs)]
		got := steerTo(t, pr.p, pkt)
		h, ok := LaneHash(pkt)
		switch {
		case got > pr.n:
			t.Fatalf("packet %x: queue %d of %d", pkt, got, pr.n+1)
		case !ok && got != 0:
			t.Fatalf("packet %x, not parsed: queue %d, want 0", pkt, got)
		case ok && got != Lane(h)%pr.n && (pr.alwaysBulk || got != pr.n):
			t.Fatalf("packet %x: queue %d, want bulk %d or express %d (always bulk: %v)", pkt, got, Lane(h)%pr.n, pr.n, pr.alwaysBulk)
		}
	})
}

// BenchmarkSteer is the program's cost per packet in the kernel
// (BPF_PROG_TEST_RUN's own timing, without the system call) for a packet
// of a bulk TCP flow, beside an empty socket filter
// that only returns: the difference is what steering adds to every packet
// the kernel routes into the TUN (gateway A's softirq work with
// expressPriority).
func BenchmarkSteer(b *testing.B) {
	frame := func(pkt []byte) []byte {
		data := make([]byte, 14, 14+len(pkt))
		data[0] = 0x02
		binary.BigEndian.PutUint16(data[12:], 0x0800)
		return append(data, pkt...)
	}
	empty, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SocketFilter, License: "MIT",
		Instructions: asm.Instructions{asm.LoadImm(asm.R0, 0, asm.DWord), asm.Return()},
	})
	if err != nil {
		b.Fatal(err)
	}
	defer empty.Close()
	p := testLoad(b, Config{Queues: 2, Quiet: time.Hour})
	bulk := frame(v4(6, 40000<<16|5201, 1420))
	for range 1000 { // past its burst: a bulk flow from here on
		steerTo(b, p, bulk[14:])
	}
	for _, tc := range []struct {
		name string
		prog *ebpf.Program
		in   []byte
	}{
		{"empty", empty, bulk},
		{"bulk-tcp-1420", p.prog, bulk},
	} {
		b.Run(tc.name, func(b *testing.B) {
			_, per, err := tc.prog.Benchmark(tc.in, b.N, b.ResetTimer)
			if err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(per.Nanoseconds()), "kernel-ns/packet")
		})
	}
}
