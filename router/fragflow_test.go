package router

import (
	"encoding/binary"
	"testing"
)

// fragmentPair returns the two IPv4 fragments of one UDP datagram of flow
// f (source port 20000+f) with identification id: the first carries the
// UDP header, the second only data. The second's data starts with the
// same two bytes as the source port, so flowOf reads the flow from either
// (the router sees only an IP fragment with no ports).
func fragmentPair(t *testing.T, f int, id uint16) (first, later []byte) {
	t.Helper()
	first = flowPacketSeq(t, f, 0)
	first = append(first, make([]byte, 800)...) // data up to offset 824
	binary.BigEndian.PutUint16(first[2:4], uint16(len(first)))
	binary.BigEndian.PutUint16(first[4:6], id)
	binary.BigEndian.PutUint16(first[6:8], 0x2000) // MF, offset 0, no DF
	later = make([]byte, 20+400)
	copy(later, first[:20])
	binary.BigEndian.PutUint16(later[2:4], uint16(len(later)))
	binary.BigEndian.PutUint16(later[6:8], uint16((len(first)-20)/8)) // last fragment
	binary.BigEndian.PutUint16(later[20:22], uint16(20000+f))
	for _, p := range [][]byte{first, later} {
		p[10], p[11] = 0, 0
		binary.BigEndian.PutUint16(p[10:12], ^ipv4Sum(p[:20]))
	}
	return first, later
}

func ipv4Sum(h []byte) uint16 {
	var s uint32
	for i := 0; i+1 < len(h); i += 2 {
		s += uint32(binary.BigEndian.Uint16(h[i:]))
	}
	for s > 0xffff {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// TestFragmentedFlowsStick: 64 UDP flows to a site with two gateways, each
// sending whole datagrams and fragmented ones (DNS with large answers,
// VXLAN): every packet of a flow, fragments included, takes one gateway,
// and the flows still spread over both (issue #19, item 10).
func TestFragmentedFlowsStick(t *testing.T) {
	clock := newFakeClock()
	a, b1, b2, _ := newMultiGateway(t, clock)
	waitUp(t, clock, a)
	const flows, rounds = 64, 2
	for r := range rounds {
		for f := range flows {
			a.tun.Inject(flowPacket(t, f, r))
			first, later := fragmentPair(t, f, uint16(r*flows+f+1))
			a.tun.Inject(first)
			a.tun.Inject(later)
		}
	}
	by := collect(t, b1, b2, flows*rounds*3)
	share, split := map[string]int{}, 0
	for f, gws := range by {
		if len(gws) != 1 {
			split++
			t.Errorf("flow %d split over gateways: %v", f, gws)
		}
		for gw := range gws {
			share[gw]++
		}
	}
	t.Logf("64 flows with fragments: %d on gw-b1, %d on gw-b2 (a split flow counts on both), %d split", share["b1"], share["b2"], split)
	if share["b1"] < flows/5 || share["b2"] < flows/5 {
		t.Errorf("flows per gateway %v, want both to carry a share", share)
	}
	if n := a.r.flows.Misses(); n != 0 {
		t.Errorf("%d later fragments did not find their first", n)
	}
}
