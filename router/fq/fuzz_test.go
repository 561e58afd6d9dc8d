package fq

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/bridgehead/bridgehead/packet"
)

// FuzzMarkCE: MarkCE never panics, changes nothing but the ECN bits (and
// the IPv4 checksum, which stays valid when it was), and marks exactly
// the packets ECT calls ECN-capable.
func FuzzMarkCE(f *testing.F) {
	f.Add(ipv4(0x02))
	f.Add(ipv4(0x00))
	f.Add(ipv4(0xff))
	f.Add(ipv6(0x01))
	f.Add([]byte{0x45})
	f.Fuzz(func(t *testing.T, pkt []byte) {
		orig := bytes.Clone(pkt)
		ect := ECT(pkt)
		v4ok := len(pkt) >= 20 && pkt[0]>>4 == 4 && packet.Checksum(pkt[:20], 0) == 0
		if got := MarkCE(pkt); got != ect {
			t.Fatalf("MarkCE %v, ECT %v", got, ect)
		}
		if !ect {
			if !bytes.Equal(pkt, orig) {
				t.Fatalf("not-ECT packet changed: %x -> %x", orig, pkt)
			}
			return
		}
		if ECT(pkt) != true || ecnField(pkt) != ecnCE {
			t.Fatalf("not CE after MarkCE: %x", pkt)
		}
		diff := 0
		for i := range pkt {
			if pkt[i] != orig[i] {
				diff++
				if i != 1 && !(pkt[0]>>4 == 4 && (i == 10 || i == 11)) {
					t.Fatalf("byte %d changed: %x -> %x", i, orig, pkt)
				}
			}
		}
		if v4ok && packet.Checksum(pkt[:20], 0) != 0 {
			t.Fatalf("checksum broken: %x -> %x (sum %#x)", orig, pkt, binary.BigEndian.Uint16(pkt[10:]))
		}
	})
}

// FuzzQueue drives a queue with random operations and checks its
// invariants: every slot handed in comes back exactly once (dequeued or
// dropped), per-flow order holds, and the bounds hold after each call.
func FuzzQueue(f *testing.F) {
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 200, 201, 202})
	f.Add(bytes.Repeat([]byte{1, 1, 1, 250}, 40))
	f.Fuzz(func(t *testing.T, ops []byte) {
		const packets = 32
		var free []int32
		for i := range packets {
			free = append(free, int32(i))
		}
		flowOf := make([]uint64, packets)
		seq := make([]int, packets)
		next := map[uint64]int{} // next sequence number per flow
		last := map[uint64]int{} // last sequence number out per flow
		out := func(s int32) {
			f := flowOf[s]
			if seq[s] <= last[f] {
				t.Fatalf("flow %d: packet %d after %d", f, seq[s], last[f])
			}
			last[f] = seq[s]
			free = append(free, s)
		}
		q, err := New(Config{Packets: packets, Bytes: 8000, Flows: 4, Quantum: 1000,
			Drop: func(s int32, _ Reason) { out(s) }})
		if err != nil {
			t.Fatal(err)
		}
		var now int64
		for _, op := range ops {
			now += int64(op) * 100_000
			switch {
			case op < 200:
				q.Reserve(1)
				s := free[len(free)-1]
				free = free[:len(free)-1]
				fl := uint64(op % 7)
				flowOf[s] = fl
				next[fl]++
				seq[s] = next[fl]
				q.Enqueue(s, fl, 40+int(op)*7, op%3 == 0, now)
			case op < 250:
				if s, _, ok := q.Dequeue(now); ok {
					out(s)
				}
			default:
				q.Flush()
			}
			if q.Len()+len(free) != packets || q.Bytes() > 8000 || q.Len() > packets {
				t.Fatalf("len %d free %d bytes %d", q.Len(), len(free), q.Bytes())
			}
		}
		for {
			s, _, ok := q.Dequeue(now + 1<<40)
			if !ok {
				break
			}
			out(s)
		}
		if len(free) != packets || q.Len() != 0 || q.Bytes() != 0 {
			t.Fatalf("after draining: free %d len %d bytes %d", len(free), q.Len(), q.Bytes())
		}
	})
}
