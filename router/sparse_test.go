package router

import (
	"testing"
	"time"
)

// TestSparseFlows: what the classifier calls sparse, packet by packet.
func TestSparseFlows(t *testing.T) {
	const ms = int64(time.Millisecond)
	type step struct {
		n      int   // packets
		size   int   // bytes each
		gap    int64 // ns before each
		sparse int   // how many of them should be sparse, the first ones
	}
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"ping every 20 ms", []step{{500, 84, 20 * ms, 500}}},
		{"100 Hz request/response", []step{{500, 92, 10 * ms, 500}}},
		{"bulk back to back: a burst, then bulk", []step{{100, 1400, 10_000, sparseBurst / (1400 + sparsePacketCost)}}},
		{"bulk stays bulk through short pauses", []step{
			{100, 1400, 10_000, sparseBurst / (1400 + sparsePacketCost)},
			{10, 84, 150 * ms, 0},
		}},
		{"bulk is sparse again after sparseQuiet", []step{
			{100, 1400, 10_000, sparseBurst / (1400 + sparsePacketCost)},
			{1, 84, sparseQuiet + ms, 1},
			{20, 84, 20 * ms, 20},
		}},
		// 564 bytes booked per ACK, 328 refilled per gap: the burst
		// lasts 67 ACKs.
		{"ACKs of a fast bulk flow, 400 a second, go bulk", []step{{400, 52, 2_500_000, 67}}},
		{"2 Mbit/s steady goes bulk", []step{{400, 1400, 5_600_000, 0}}}, // checked below: not all sparse
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s sparseFlows
			ns := int64(time.Second)
			for si, st := range tc.steps {
				got := 0
				for i := range st.n {
					ns += st.gap
					if s.sparse(42, st.size, ns) {
						if got != i {
							t.Fatalf("step %d: packet %d sparse after a bulk one", si, i)
						}
						got++
					}
				}
				if tc.name == "2 Mbit/s steady goes bulk" {
					if got == st.n || got == 0 {
						t.Errorf("step %d: %d of %d sparse, want a burst and then bulk", si, got, st.n)
					}
					continue
				}
				if got != st.sparse {
					t.Errorf("step %d: %d of %d packets sparse, want %d", si, got, st.n, st.sparse)
				}
			}
			// Another flow hash bucket is untouched.
			if !s.sparse(43, 1400, ns) {
				t.Error("a new flow is not sparse")
			}
		})
	}
}

// A sparse flow's packet is sealed and sent by the reader at once, on the
// express lane of a peer that has one, while a bulk flow's wait in the
// fair queue for the sealer; toward a peer without an express lane the
// sparse packet carries its flow's lane byte. Its slot comes back.
func TestSparseFlowSentAtOnce(t *testing.T) {
	for _, express := range []bool{true, false} {
		t.Run(map[bool]string{true: "peer with express lane", false: "peer without"}[express], func(t *testing.T) {
			h, sb, p := newFQHotPair(t)
			p.sparse = new(sparseFlows)
			pA := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
			kpA := pA.current.Load()
			pA.laneSession.Store(laneTag(kpA))
			if express {
				pA.expressSession.Store(laneTag(kpA))
			}
			// A bulk flow past its burst: queued, nothing sent.
			var bulk [][]byte
			for i := range 200 {
				bulk = append(bulk, flowPacket(t, 1, i))
				bulk[i] = append(bulk[i], make([]byte, 1300)...)
				fixIPv4Length(bulk[i])
			}
			// A flow in another bucket (hashes are seeded per router).
			small := flowPacket(t, 2, 0)
			for f := 3; testHash(h.a.flows, small)%sparseBuckets == testHash(h.a.flows, bulk[0])%sparseBuckets; f++ {
				small = flowPacket(t, f, 0)
			}
			feed(t, h.a, p, bulk...)
			sentBulk := sb.sent
			if sentBulk >= len(bulk) {
				t.Fatalf("%d of %d bulk packets sent before the sealer ran", sentBulk, len(bulk))
			}
			// A ping-sized packet of another flow: sent by the reader.
			feed(t, h.a, p, small)
			if sb.sent != sentBulk+1 {
				t.Fatalf("the sparse packet was not sent at once (%d datagrams, want %d)", sb.sent, sentBulk+1)
			}
			lb := sb.captureBind.last[1]
			want := laneByte(pA, kpA, testHash(h.a.flows, small), false)
			if express {
				want = 0xff
			}
			if lb != want {
				t.Errorf("sparse packet's lane byte %#x, want %#x", lb, want)
			}
			// The reader's express path allocates nothing (a frozen clock:
			// 21 more packets of the flow, at their size plus
			// sparsePacketCost each, stay within its burst).
			if !testing.Short() {
				if n := testing.AllocsPerRun(20, func() { feed(t, h.a, p, small) }); n != 0 {
					t.Errorf("%.1f allocations per sparse packet, want 0", n)
				}
			}
			sentSparse := sb.sent - sentBulk
			h.a.sealFQ(p)
			if sb.sent != len(bulk)+sentSparse {
				t.Errorf("%d datagrams after the sealer, want %d", sb.sent, len(bulk)+sentSparse)
			}
			if len(p.free) != len(p.pool) {
				t.Errorf("%d of %d slots free", len(p.free), len(p.pool))
			}
		})
	}
}
