package router

import (
	"testing"

	"github.com/bridgehead/bridgehead/router/sparse"
)

// A sparse flow's packet is sealed and sent by the reader at once, on the
// express lane of a peer that has one, while a bulk flow's wait in the
// fair queue for the sealer; toward a peer without an express lane the
// sparse packet carries its flow's lane byte. Its slot comes back.
func TestSparseFlowSentAtOnce(t *testing.T) {
	for _, express := range []bool{true, false} {
		t.Run(map[bool]string{true: "peer with express lane", false: "peer without"}[express], func(t *testing.T) {
			h, sb, p := newFQHotPair(t)
			p.sparse = new(sparse.Flows)
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
			for f := 3; testHash(h.a.flows, small)%sparse.Buckets == testHash(h.a.flows, bulk[0])%sparse.Buckets; f++ {
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
			// sparse.PacketCost each, stay within its burst).
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
