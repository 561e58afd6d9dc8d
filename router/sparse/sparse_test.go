package sparse

import (
	"testing"
	"time"
)

// TestFlows: what the classifier calls sparse, packet by packet.
func TestFlows(t *testing.T) {
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
		{"bulk back to back: a burst, then bulk", []step{{100, 1400, 10_000, Burst / (1400 + PacketCost)}}},
		{"bulk stays bulk through short pauses", []step{
			{100, 1400, 10_000, Burst / (1400 + PacketCost)},
			{10, 84, 150 * ms, 0},
		}},
		{"bulk is sparse again after Quiet", []step{
			{100, 1400, 10_000, Burst / (1400 + PacketCost)},
			{1, 84, Quiet + ms, 1},
			{20, 84, 20 * ms, 20},
		}},
		// 564 bytes booked per ACK, 328 refilled per gap: the burst
		// lasts 67 ACKs.
		{"ACKs of a fast bulk flow, 400 a second, go bulk", []step{{400, 52, 2_500_000, 67}}},
		{"2 Mbit/s steady goes bulk", []step{{400, 1400, 5_600_000, 0}}}, // checked below: not all sparse
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s Flows
			ns := int64(time.Second)
			for si, st := range tc.steps {
				got := 0
				for i := range st.n {
					ns += st.gap
					if s.Sparse(42, st.size, ns) {
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
			if !s.Sparse(43, 1400, ns) {
				t.Error("a new flow is not sparse")
			}
		})
	}
}
