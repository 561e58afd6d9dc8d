package router

import (
	"net/netip"
	"sync"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/udp"
)

// flowLogBind records the flow hash of every datagram sent on it, as the
// relay path's FlowSender sees them. One goroutine uses each.
type flowLogBind struct {
	captureBind
	flows []uint64
}

func (b *flowLogBind) SendFlows(bufs [][]byte, flows []uint64, ep netip.AddrPort) error {
	b.flows = append(b.flows, flows...)
	return b.captureBind.Send(bufs, ep)
}

var _ udp.Bind = (*flowLogBind)(nil)

// fragLane is one inside lane of A, driven by hand: its own batch, run
// and socket, as the lane's goroutine owns them.
type fragLane struct {
	b    *insideBatch
	bind *flowLogBind
}

func newFragLane(r *Router) *fragLane {
	l := &fragLane{b: r.newInsideBatch(), bind: &flowLogBind{captureBind: *newCaptureBind("192.0.2.1:51820")}}
	l.b.run.bind, l.b.run.flowSend = l.bind, l.bind
	return l
}

// route routes pkt on the lane and returns the flow hash it was sent with
// (0: not sent, an error). Any goroutine may call it.
func (l *fragLane) route(t *testing.T, h *hotPair, pkt []byte) uint64 {
	t.Helper()
	l.b.sizes[0] = copy(l.b.bufs[0][bufHeadroom:], pkt)
	n := len(l.bind.flows)
	h.a.routeBatch(l.b, 1, h.now)
	if len(l.bind.flows) != n+1 {
		t.Errorf("packet not sent; drops %+v", h.a.drops.snapshot())
		return 0
	}
	return l.bind.flows[n]
}

// collidingPairs returns n pairs of fragmented datagrams (first and later
// fragment each), the second datagram of each pair of another flow and
// in the same fragment table slot as the first.
func collidingPairs(t *testing.T, seed uint64, n int) (x, y [][2][]byte) {
	t.Helper()
	slot := func(p []byte) uint64 {
		_, key, _, _ := packet.FlowHashFragment(p, seed)
		return key % flowhash.Slots
	}
	id := uint16(1)
	for i := range n {
		xf, xl := fragmentPair(t, i%64, id)
		id++
		for {
			yf, yl := fragmentPair(t, 64+i%64, id)
			id++
			if slot(yf) == slot(xf) {
				x, y = append(x, [2][]byte{xf, xl}), append(y, [2][]byte{yf, yl})
				break
			}
		}
	}
	return x, y
}

// TestFragmentsStayOnTheirLane: each lane routes the fragments of its own
// datagrams (the kernel puts a datagram's fragments on one TUN queue),
// and a later fragment must leave with its first fragment's flow hash,
// so through the same gateway, whatever another lane routes meanwhile,
// even a datagram that falls in the same fragment table slot.
func TestFragmentsStayOnTheirLane(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	x, y := collidingPairs(t, h.a.flows.Seed(), 1)
	l0, l1 := newFragLane(h.a), newFragLane(h.a)
	fx := l0.route(t, h, x[0][0])
	fy := l1.route(t, h, y[0][0]) // same slot, on the other lane
	if got := l0.route(t, h, x[0][1]); got != fx {
		t.Errorf("lane 0: later fragment hashed %#x, its first %#x: another lane's datagram took its slot", got, fx)
	}
	if got := l1.route(t, h, y[0][1]); got != fy {
		t.Errorf("lane 1: later fragment hashed %#x, its first %#x", got, fy)
	}
	if n := h.a.flows.Misses(); n != 0 {
		t.Errorf("%d later fragments did not find their first", n)
	}
}

// TestFragmentLanesConcurrent is TestFragmentsStayOnTheirLane with both
// lanes routing at once, as their goroutines do: under -race it also
// checks that no lane touches another's fragment table.
func TestFragmentLanesConcurrent(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	const n = 300
	x, y := collidingPairs(t, h.a.flows.Seed(), n)
	var wg sync.WaitGroup
	split := make([]int, 2)
	for i, dgrams := range [][][2][]byte{x, y} {
		l := newFragLane(h.a)
		wg.Go(func() {
			for _, d := range dgrams {
				if l.route(t, h, d[0]) != l.route(t, h, d[1]) {
					split[i]++
				}
			}
		})
	}
	wg.Wait()
	if split[0]+split[1] != 0 {
		t.Errorf("datagrams split over flow hashes: lane 0 %d, lane 1 %d of %d each (misses %d)", split[0], split[1], n, h.a.flows.Misses())
	}
}

// testHash is the flow hash of pkt as a lane that saw no fragment yet
// gives it: for whole packets and first fragments, what every lane gives.
func testHash(f *flowhash.Hasher, pkt []byte) uint64 { return f.NewTable().Hash(pkt) }
