package router

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"sync"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// laneBind is one lane's socket in the lane tests: what the lane sends is
// copied into the receiving lane's outside batch (buffers allocated once),
// as if the datagrams crossed the WAN to the peer's lane.
type laneBind struct {
	local netip.AddrPort
	to    *outsideBatch
	n     int
}

func (b *laneBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) { return 0, nil }
func (b *laneBind) Send(bufs [][]byte, _ netip.AddrPort) error {
	for _, m := range bufs {
		b.to.sizes[b.n] = copy(b.to.bufs[b.n], m)
		b.to.eps[b.n] = b.local
		b.n++
	}
	return nil
}
func (b *laneBind) BatchSize() int            { return 64 }
func (b *laneBind) LocalAddr() netip.AddrPort { return b.local }
func (b *laneBind) Close() error              { return nil }

// idTUN records the 4-byte ids at the start of the UDP payloads written to
// it. One per lane: it is not safe for concurrent use.
type idTUN struct {
	nullTUN
	ids []uint32
}

func (d *idTUN) Write(bufs [][]byte, off int) (int, error) {
	for _, b := range bufs {
		d.ids = append(d.ids, binary.BigEndian.Uint32(b[off+28:]))
	}
	return len(bufs), nil
}

// testLane is an outside batch of a lane of r that writes to dev (a
// nullTUN if nil), for tests that drive receiveBatch directly.
func (r *Router) testLane(dev tun.Device) *outsideBatch {
	if dev == nil {
		dev = &nullTUN{batch: 64}
	}
	b := r.newOutsideBatch()
	b.lane = &lane{tun: &tunDevice{Device: dev}, health: new(loopHealth)}
	return b
}

// sealAll seals one packet per id on A and returns the datagrams.
func sealAll(t *testing.T, h *hotPair, ids []uint32) [][]byte {
	t.Helper()
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	bind := &laneBind{local: h.bindA.local, to: out}
	in.run.bind = bind
	payload := make([]byte, 100)
	dgrams := make([][]byte, 0, len(ids))
	for _, id := range ids {
		binary.BigEndian.PutUint32(payload, id)
		refill(in, udpPacket(t, podA, podB, payload))
		bind.n = 0
		h.a.routeBatch(in, 1, h.now)
		if bind.n != 1 {
			t.Fatalf("packet %d not sealed", id)
		}
		dgrams = append(dgrams, append([]byte(nil), out.bufs[0][:out.sizes[0]]...))
	}
	return dgrams
}

// rekey runs a new handshake between A and B and installs it as a real one
// would: A (initiator) makes it current, B (responder) keeps it next until
// the first packet on it confirms it.
func rekey(t *testing.T, h *hotPair, idxA, idxB uint32) {
	t.Helper()
	idA, idB := h.a.keys.Load().Current, h.b.keys.Load().Current
	in, msg, err := idA.CreateInitiation(idB.Public, idxA, h.now)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := idB.ConsumeInitiation(msg)
	if err != nil {
		t.Fatal(err)
	}
	kpB, resp, err := idB.CreateResponse(ri, idxB, h.now)
	if err != nil {
		t.Fatal(err)
	}
	kpA, err := in.ConsumeResponse(resp, h.now)
	if err != nil {
		t.Fatal(err)
	}
	pA := h.a.state.Load().peers[idB.Public]
	h.a.index.add(pA, kpA)
	if gone, ok := pA.keypairs.establish(kpA); !ok {
		t.Fatal("establish refused")
	} else {
		h.a.retire(gone)
	}
	pB := h.b.state.Load().peers[idA.Public]
	h.b.index.add(pB, kpB)
	if gone, ok := pB.keypairs.answer(kpB); !ok {
		t.Fatal("answer refused")
	} else {
		h.b.retire(gone)
	}
}

// TestLanesOpenOneSessionConcurrently: four lanes of B open the packets of
// one session at once, across a rekey (the first packets on the new
// session confirm it from whichever lanes get them first while the others
// still open packets of the old one), with every tenth datagram delivered
// twice on another lane. Every packet must reach the TUN exactly once:
// no duplicate accepted, no valid packet inside the window dropped.
func TestLanesOpenOneSessionConcurrently(t *testing.T) {
	const lanes, perKey, chunk = 4, 3000, 16
	h := newHotPair(t, bhcrypto.ChaChaPoly)
	ids := make([]uint32, 2*perKey)
	for i := range ids {
		ids[i] = uint32(i)
	}
	dgrams := sealAll(t, h, ids[:perKey])
	rekey(t, h, 3, 4)
	dgrams = append(dgrams, sealAll(t, h, ids[perKey:])...)

	// Chunks go round-robin to the lanes, so each lane holds old- and
	// new-session packets and the lanes overtake one another; duplicates
	// go to the next lane, after the original's chunk.
	work := make([][][]byte, lanes)
	dups := 0
	for c := 0; c*chunk < len(dgrams); c++ {
		l := c % lanes
		part := dgrams[c*chunk : min((c+1)*chunk, len(dgrams))]
		work[l] = append(work[l], part...)
		for i, d := range part {
			if (c*chunk+i)%10 == 0 {
				work[(l+1)%lanes] = append(work[(l+1)%lanes], d)
				dups++
			}
		}
	}
	tuns := make([]*idTUN, lanes)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for l := range lanes {
		tuns[l] = &idTUN{nullTUN: nullTUN{batch: 64}}
		b := h.b.testLane(tuns[l])
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			for len(work[l]) > 0 {
				n := 0
				for n < 8 && len(work[l]) > 0 {
					b.sizes[n] = copy(b.bufs[n], work[l][0])
					b.eps[n] = h.bindA.local
					work[l] = work[l][1:]
					n++
				}
				h.b.receiveBatch(b, n, h.now)
			}
		}()
	}
	close(start)
	wg.Wait()

	got := make(map[uint32]int, len(ids))
	for _, d := range tuns {
		for _, id := range d.ids {
			got[id]++
		}
	}
	for _, id := range ids {
		if got[id] != 1 {
			t.Errorf("packet %d delivered %d times", id, got[id])
		}
	}
	if r := h.b.drops.Get(Outside, ReasonReplay); r != uint64(dups) {
		t.Errorf("%d replay drops, want %d (the duplicates)", r, dups)
	}
	pB := h.b.state.Load().peers[h.a.keys.Load().Current.Public]
	if kp := pB.current.Load(); kp == nil || kp.LocalIndex != 4 {
		t.Errorf("B's current session is not the new one after the rekey")
	}
}

// benchmarkLanes runs lanes pipelines at once, each sealing batches of 16
// packets of 1420 bytes on A and opening them on B, on one shared session:
// A's send counter, both peers' counters, the index and the routing state
// are shared, as they are between a Router's lanes. B said it reads lane
// bytes, and pipe i carries a flow whose lane byte the kernel would steer
// to B's socket i, so each pipe meets its own replay window at B, as a
// lane does. Run with -cpu 1,2 to compare one core with two:
//
//	go test -run '^$' -bench BenchmarkLanes -cpu 1,2 -count 5 ./router/
//
// replay-drops/op counts packets one lane opened after another had moved
// the window more than ReplayWindowSize past them (a lane descheduled
// that long); they are still sealed and opened, so the work is the same.
func benchmarkLanes(b *testing.B, lanes int) {
	const batch, size = 16, 1420
	h := newHotPair(b, bhcrypto.AESGCM)
	pkt := udpPacket(b, podA, podB, make([]byte, size-28))
	type pipe struct {
		in   *insideBatch
		out  *outsideBatch
		bind *laneBind
		pkt  []byte
	}
	pipes := make([]pipe, lanes)
	pkts := lanePackets(b, h, pkt, lanes)
	for i := range pipes {
		in := h.a.newInsideBatch()
		out := h.b.testLane(nil)
		bind := &laneBind{local: h.bindA.local, to: out}
		in.run.bind = bind
		pipes[i] = pipe{in, out, bind, pkts[i]}
	}
	b.SetBytes(batch * size)
	b.ReportAllocs()
	b.ResetTimer()
	var wg sync.WaitGroup
	for i := range pipes {
		p := pipes[i]
		n := b.N / lanes
		if i < b.N%lanes {
			n++
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range n {
				for k := range batch {
					p.in.sizes[k] = copy(p.in.bufs[k][bufHeadroom:], p.pkt)
				}
				p.bind.n = 0
				p.in.run.now = h.a.mono.ns(h.now)
				h.a.route(p.in, batch, h.now)
				h.a.flushInside(p.in.run)
				h.b.receiveBatch(p.out, p.bind.n, h.now)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(h.b.drops.Get(Outside, ReasonReplay))/float64(b.N), "replay-drops/op")
}

// lanePackets makes B of h a Router of lanes lanes that said it reads lane
// bytes on the session, and returns, for each of B's lanes, a copy of pkt
// (an IPv4 UDP packet) with an inner source port whose flow's lane byte
// steers it to that lane.
func lanePackets(tb testing.TB, h *hotPair, pkt []byte, lanes int) [][]byte {
	tb.Helper()
	pA := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	kpA := pA.current.Load()
	pA.laneSession.Store(laneTag(kpA))
	pB := h.b.state.Load().peers[h.a.keys.Load().Current.Public]
	h.b.index.lanes = lanes
	h.b.index.add(pB, pB.current.Load()) // again, with a window per lane
	out := make([][]byte, lanes)
	for port, found := uint16(1000), 0; found < lanes; port++ {
		p := bytes.Clone(pkt)
		binary.BigEndian.PutUint16(p[20:], port)
		l := int(laneByte(pA, kpA, testHash(h.a.flows, p), false)) % lanes
		if out[l] == nil {
			out[l] = p
			found++
		}
	}
	return out
}

func BenchmarkLanes(b *testing.B) {
	for _, lanes := range []int{1, 2} {
		b.Run(fmt.Sprintf("lanes=%d", lanes), func(b *testing.B) { benchmarkLanes(b, lanes) })
	}
}

// TestLanesAllocs: a lane's seal and open, with another lane working the
// same session at the same time, allocate nothing per packet.
func TestLanesAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	pkt := udpPacket(t, podA, podB, make([]byte, 1000))
	in := h.a.newInsideBatch()
	out := h.b.testLane(nil)
	bind := &laneBind{local: h.bindA.local, to: out}
	in.run.bind = bind
	step := func() {
		refill(in, pkt)
		bind.n = 0
		h.a.routeBatch(in, 1, h.now)
		h.b.receiveBatch(out, bind.n, h.now)
	}
	step()
	if got := out.lane.tun.Device.(*nullTUN).written; got != 1 {
		t.Fatalf("warm-up: %d packets reached the TUN, want 1", got)
	}
	if a := testing.AllocsPerRun(200, step); a != 0 {
		t.Errorf("%v allocations per packet, want 0", a)
	}
}

// TestNewLanesChecks: lanes must match lane 0.
func TestNewLanesChecks(t *testing.T) {
	id := newIdentity(t, bhcrypto.AESGCM)
	mk := func() (*nullTUN, *captureBind) { return &nullTUN{batch: 64}, newCaptureBind("192.0.2.1:51820") }
	t0, b0 := mk()
	t1, b1 := mk()
	tooMany := make([]Lane, MaxLanes)
	for i := range tooMany {
		tooMany[i] = Lane{TUN: t1, Bind: b1}
	}
	for _, tc := range []struct {
		name  string
		lanes []Lane
		ok    bool
	}{
		{"two", []Lane{{TUN: t1, Bind: b1}}, true},
		{"no bind", []Lane{{TUN: t1}}, false},
		{"batch", []Lane{{TUN: &nullTUN{batch: 1}, Bind: b1}}, false},
		{"too many", tooMany, false},
	} {
		r, err := New(Options{TUN: t0, Bind: b0, Identity: id, Lanes: tc.lanes, Clock: newFakeClock()})
		if (err == nil) != tc.ok {
			t.Errorf("%s: err = %v", tc.name, err)
		}
		if err == nil && r.Lanes() != len(tc.lanes)+1 {
			t.Errorf("%s: %d lanes", tc.name, r.Lanes())
		}
	}
}

// TestLaneBytes: A sets no lane byte until B says, on the session in use,
// that it reads them; then each flow gets one non-zero lane byte, flows
// spread over many, and B opens them; a new session starts without again.
func TestLaneBytes(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	in := h.a.newInsideBatch()
	out := h.b.testLane(nil)
	bind := &laneBind{local: h.bindA.local, to: out}
	in.run.bind = bind
	pkt := udpPacket(t, podA, podB, make([]byte, 100))
	seal := func(port uint16) byte {
		t.Helper()
		binary.BigEndian.PutUint16(pkt[20:], port) // the inner UDP source port
		refill(in, pkt)
		bind.n = 0
		h.a.routeBatch(in, 1, h.now)
		if bind.n != 1 {
			t.Fatalf("port %d: packet not sealed", port)
		}
		lane := out.bufs[0][1]
		before := out.lane.tun.Device.(*nullTUN).written
		h.b.receiveBatch(out, 1, h.now)
		if out.lane.tun.Device.(*nullTUN).written != before+1 {
			t.Fatalf("port %d, lane byte %d: B did not deliver the packet", port, lane)
		}
		return lane
	}
	if l := seal(1000); l != 0 {
		t.Fatalf("lane byte %d before B said it reads them", l)
	}
	pA := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	reply := func(flags byte) []byte {
		b := make([]byte, probeLen)
		b[0], b[1] = probeReply, flags
		echo := uint64(h.a.mono.ns(h.now))
		pA.live.inflight.Sent(echo) // it answers a probe in flight
		binary.BigEndian.PutUint64(b[8:16], echo)
		return b
	}
	h.a.probe.handleControl(nil, pA, pA.current.Load(), reply(0), h.bindB.local, h.now)
	if l := seal(1000); l != 0 {
		t.Fatalf("lane byte %d after a reply without flagLanes", l)
	}
	h.a.probe.handleControl(nil, pA, pA.current.Load(), reply(flagLanes), h.bindB.local, h.now)
	seen := map[byte]bool{}
	for port := uint16(1000); port < 1064; port++ {
		l := seal(port)
		if l == 0 {
			t.Fatalf("port %d: no lane byte after flagLanes", port)
		}
		if again := seal(port); again != l {
			t.Fatalf("port %d: lane bytes %d then %d: a flow changed lanes", port, l, again)
		}
		seen[l] = true
	}
	if len(seen) < 32 {
		t.Errorf("64 flows got %d lane bytes", len(seen))
	}
	rekey(t, h, 3, 4)
	if l := seal(1000); l != 0 {
		t.Fatalf("lane byte %d on a new session B has not spoken on", l)
	}
}

// TestLaneReplayWindows: each receiving lane's share of a session has its
// own replay window, picked by the lane byte: a lane far ahead does not
// age out another lane's counters, a duplicate is refused in its own
// window, and messages without a lane byte use the keypair's window.
func TestLaneReplayWindows(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	kp := h.b.state.Load().peers[h.a.keys.Load().Current.Public].current.Load()
	e := &indexEntry{kp: kp, windows: laneWindows(3), lanes: 3}
	ahead := uint64(3 * bhcrypto.ReplayWindowSize)
	for _, step := range []struct {
		counter uint64
		lane    byte
		ok      bool
	}{
		{ahead, 1, true},      // lane 1 runs far ahead
		{10, 2, true},         // lane 2's older counter is still new
		{10, 2, false},        // its duplicate is not
		{11, 5, true},         // lane byte 5 is lane 2 too (5 mod 3)
		{11, 2, false},        // so a replay on lane byte 2 meets the same window
		{12, 1, false},        // too old for lane 1's window
		{13, 0, true},         // no lane byte: the keypair's window
		{13, 0, false},        //
		{ahead - 5, 4, true},  // lane byte 4 is lane 1
		{ahead - 5, 1, false}, //
		{ahead + 1, 0, true},  // the keypair's window is apart
		{14, 0, false},        // and now too old there
		{bhcrypto.RejectAfterMessages, 2, false},
	} {
		if got := e.checkReplay(step.counter, step.lane); got != step.ok {
			t.Errorf("counter %d lane byte %d: new=%v, want %v", step.counter, step.lane, got, step.ok)
		}
	}
	if laneWindows(1) != nil || len(laneWindows(64)) != maxLaneWindows {
		t.Errorf("windows for 1 and 64 lanes: %d, %d", len(laneWindows(1)), len(laneWindows(64)))
	}
}

// TestExpressReplayWindow: the express lane's messages have a window of
// their own, with one lane or several: the lanes' sockets far ahead do
// not age them out, and a duplicate is refused.
func TestExpressReplayWindow(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	kp := h.b.state.Load().peers[h.a.keys.Load().Current.Public].current.Load()
	for _, lanes := range []int{1, 3} {
		ahead := uint64(3*bhcrypto.ReplayWindowSize) * uint64(lanes) // the keypair's window is shared by both runs
		e := &indexEntry{kp: kp, windows: laneWindows(lanes), lanes: lanes, express: new(laneWindow)}
		for _, step := range []struct {
			counter uint64
			lane    byte
			ok      bool
		}{
			{ahead, 1, true},             // a lane runs far ahead
			{ahead + 1, 0, true},         // and the keypair's window
			{10, udp.ExpressLane, true},  // an express message is still new
			{10, udp.ExpressLane, false}, // its duplicate is not
			{9, udp.ExpressLane, true},   // reordered within the window
		} {
			if got := e.checkReplay(step.counter, step.lane); got != step.ok {
				t.Errorf("lanes %d: counter %d lane byte %d: new=%v, want %v", lanes, step.counter, step.lane, got, step.ok)
			}
		}
	}
}

// TestSortByLane: a run is ordered by lane byte, stably (each lane byte's
// datagrams and flows keep their order), without allocating once warm.
func TestSortByLane(t *testing.T) {
	lanes := []byte{3, 1, 3, 0, 1, 3, 2, 0}
	run := &sealRun{out: make([][]byte, 0, 16), flows: make([]uint64, 0, 16)}
	msgs := make([][]byte, len(lanes))
	for i, l := range lanes {
		msgs[i] = []byte{bhcrypto.MsgTransport, l, 0, 0, byte(i)}
	}
	fill := func() {
		run.out, run.flows = run.out[:0], run.flows[:0]
		for i, m := range msgs {
			run.out = append(run.out, m)
			run.flows = append(run.flows, uint64(i))
		}
	}
	fill()
	run.sortByLane()
	var got []string
	for i, m := range run.out {
		if uint64(m[4]) != run.flows[i] {
			t.Fatalf("datagram %d and its flow parted", i)
		}
		got = append(got, fmt.Sprintf("%d/%d", m[1], m[4]))
	}
	if want := "0/3 0/7 1/1 1/4 2/6 3/0 3/2 3/5"; fmt.Sprint(got) != "["+want+"]" {
		t.Errorf("sorted %v, want [%s]", got, want)
	}
	if a := testing.AllocsPerRun(50, func() { fill(); run.sortByLane() }); a != 0 {
		t.Errorf("%v allocations per sort", a)
	}
}

// TestLaneStray: a lane's socket gets transport messages of lane byte
// (b mod lanes) == its index; others are strays, except lane byte 0
// (hashed) and the express lane byte (a small datagram may end a run).
func TestLaneStray(t *testing.T) {
	for _, tc := range []struct {
		index, lanes int
		lb           byte
		want         bool
	}{
		{0, 1, 7, false},
		{0, 2, 0, false},
		{0, 2, 2, false},
		{0, 2, 1, true},
		{1, 2, 1, false},
		{1, 2, 4, true},
		{1, 2, udp.ExpressLane, false},
		{2, 3, 5, false},
		{2, 3, 6, true},
		{-1, 2, 1, false}, // the express lane's socket
	} {
		l := &lane{index: tc.index}
		l.setForeign(tc.lanes)
		if got := l.stray(tc.lb); got != tc.want {
			t.Errorf("lane %d of %d, lane byte %d: stray %v, want %v", tc.index, tc.lanes, tc.lb, got, tc.want)
		}
	}
	// Every lane byte of every lane of every lane count: the bitset
	// says what the modulo says.
	for n := 1; n <= MaxLanes; n++ {
		for index := 0; index < n; index++ {
			l := &lane{index: index}
			l.setForeign(n)
			for lb := 0; lb < 256; lb++ {
				want := lb != 0 && lb != udp.ExpressLane && lb%n != index
				if got := l.stray(byte(lb)); got != want {
					t.Fatalf("lane %d of %d, lane byte %d: stray %v, want %v", index, n, lb, got, want)
				}
			}
		}
	}
}
