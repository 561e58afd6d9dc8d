package router

import (
	"bytes"
	"errors"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
)

// nullTUN is a TUN whose writes are counted and dropped. Read is never
// called: the tests drive the batch functions directly.
type nullTUN struct {
	written int
	batch   int
}

func (d *nullTUN) Read([][]byte, []int, int) (int, error) { return 0, tun.ErrClosed }
func (d *nullTUN) Write(bufs [][]byte, _ int) (int, error) {
	d.written += len(bufs)
	return len(bufs), nil
}
func (d *nullTUN) BatchSize() int { return d.batch }
func (d *nullTUN) MTU() int       { return 1420 }
func (d *nullTUN) Name() string   { return "null" }
func (d *nullTUN) Close() error   { return nil }

// captureBind keeps a copy of the last datagram sent, in a buffer
// allocated once.
type captureBind struct {
	local netip.AddrPort
	last  []byte
	n     int
	sent  int
	// discard counts datagrams without copying them (benchmarks).
	discard bool
}

func newCaptureBind(local string) *captureBind {
	return &captureBind{local: netip.MustParseAddrPort(local), last: make([]byte, 65536)}
}

func (b *captureBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) { return 0, nil }
func (b *captureBind) Send(bufs [][]byte, _ netip.AddrPort) error {
	if b.discard {
		b.sent += len(bufs)
		return nil
	}
	for _, m := range bufs {
		b.n = copy(b.last, m)
		b.sent++
	}
	return nil
}
func (b *captureBind) BatchSize() int            { return 64 }
func (b *captureBind) LocalAddr() netip.AddrPort { return b.local }
func (b *captureBind) Close() error              { return nil }

// hotPair is two routers that are not running, with a session installed
// directly, so the tests can call the batch functions of the data path.
type hotPair struct {
	a, b         *Router
	bindA, bindB *captureBind
	tunB         *nullTUN
	now          time.Time
}

func newHotPair(tb testing.TB, cipher bhcrypto.CipherKind) *hotPair {
	tb.Helper()
	return newHotPairClock(tb, cipher, newFakeClock())
}

// newHotPairClock is newHotPair with the routers on clock.
func newHotPairClock(tb testing.TB, cipher bhcrypto.CipherKind, clock Clock) *hotPair {
	tb.Helper()
	idA, idB := newIdentity(tb, cipher), newIdentity(tb, cipher)
	h := &hotPair{bindA: newCaptureBind("192.0.2.1:51820"), bindB: newCaptureBind("192.0.2.2:51820"), tunB: &nullTUN{batch: 64}}
	var err error
	h.now = clock.Now()
	h.a, err = New(Options{TUN: &nullTUN{batch: 64}, Bind: h.bindA, Identity: idA, Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	h.b, err = New(Options{TUN: h.tunB, Bind: h.bindB, Identity: idB, Clock: clock})
	if err != nil {
		tb.Fatal(err)
	}
	if err := h.a.SetConfig(twoSiteConfig("site-a", idA.Public, idB.Public, h.bindA.local, h.bindB.local)); err != nil {
		tb.Fatal(err)
	}
	if err := h.b.SetConfig(twoSiteConfig("site-b", idA.Public, idB.Public, h.bindA.local, h.bindB.local)); err != nil {
		tb.Fatal(err)
	}
	in, msg, err := idA.CreateInitiation(idB.Public, 1, h.now)
	if err != nil {
		tb.Fatal(err)
	}
	ri, err := idB.ConsumeInitiation(msg)
	if err != nil {
		tb.Fatal(err)
	}
	kpB, resp, err := idB.CreateResponse(ri, 2, h.now)
	if err != nil {
		tb.Fatal(err)
	}
	kpA, err := in.ConsumeResponse(resp, h.now)
	if err != nil {
		tb.Fatal(err)
	}
	install := func(r *Router, peerKey bhcrypto.PublicKey, kp *bhcrypto.Keypair) {
		p := r.state.Load().peers[peerKey]
		p.current.Store(kp)
		r.index.add(p, kp)
	}
	install(h.a, idB.Public, kpA)
	install(h.b, idA.Public, kpB)
	return h
}

// TestHotPathAllocs asserts zero allocations per packet on the inside
// path (route + seal + send) and the outside path (open + replay check +
// source check + TUN write).
func TestHotPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	pkt := udpPacket(t, podA, podB, make([]byte, 1000))
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	inside := func() {
		copy(in.bufs[0][bufHeadroom:], pkt)
		in.sizes[0] = len(pkt)
		h.a.routeBatch(in, 1, h.now)
	}
	if n := testing.AllocsPerRun(1000, inside); n != 0 {
		t.Errorf("inside path: %.1f allocations per packet, want 0", n)
	}
	both := func() {
		inside()
		out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
	}
	before := h.tunB.written
	if n := testing.AllocsPerRun(1000, both); n != 0 {
		t.Errorf("inside+outside path: %.1f allocations per packet, want 0", n)
	}
	if h.tunB.written-before < 1000 {
		t.Fatalf("only %d of 1000+ packets reached B's TUN; drops: %+v", h.tunB.written-before, h.b.drops.snapshot())
	}
}

// TestSealQueuedAllocs: the production inside path (slots queued for the
// sealer, and a read sealed by the reader after the queue) allocates
// nothing per packet either.
func TestSealQueuedAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	pkt := udpPacket(t, podA, podB, make([]byte, 1000))
	p := h.a.newInsidePipe(h.a.lanes[0])
	sent := h.bindA.sent
	run := func() {
		// Two single packets queued, then a read of two sealed by the
		// reader: four packets, one flush.
		for range 2 {
			b := <-p.free
			copy(b.bufs[0][bufHeadroom:], pkt)
			b.sizes[0], b.n = len(pkt), 1
			p.full <- b
		}
		own := <-p.free
		for i := range 2 {
			copy(own.bufs[i][bufHeadroom:], pkt)
			own.sizes[i] = len(pkt)
		}
		own.n = 2
		h.a.sealQueued(p, own)
	}
	if n := testing.AllocsPerRun(500, run); n != 0 {
		t.Errorf("sealQueued: %.1f allocations per run of 4 packets, want 0", n)
	}
	if got := h.bindA.sent - sent; got < 4*500 {
		t.Errorf("%d datagrams sent, want at least %d", got, 4*500)
	}
	if len(p.free) != insideSlots {
		t.Errorf("%d of %d slots back in free", len(p.free), insideSlots)
	}
}

// TestReplayedDatagramDropped sends the same sealed datagram twice: the
// second is dropped as a replay, after authentication.
func TestReplayedDatagramDropped(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	pkt := udpPacket(t, podA, podB, []byte("once"))
	copy(in.bufs[0][bufHeadroom:], pkt)
	in.sizes[0] = len(pkt)
	h.a.routeBatch(in, 1, h.now)
	captured := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	for i := range 2 {
		out.sizes[0] = copy(out.bufs[0], captured)
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
		if i == 0 && h.tunB.written != 1 {
			t.Fatalf("first copy not delivered")
		}
	}
	if h.tunB.written != 1 || h.b.drops.Get(Outside, ReasonReplay) != 1 {
		t.Fatalf("written %d, replay drops %d; want 1 and 1", h.tunB.written, h.b.drops.Get(Outside, ReasonReplay))
	}
	// A tampered copy fails authentication and does not disturb the
	// window: the next genuine packet is still delivered.
	h.a.routeBatch(refill(in, pkt), 1, h.now)
	genuine := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	tampered := append([]byte(nil), genuine...)
	tampered[len(tampered)-1] ^= 1
	for _, m := range [][]byte{tampered, genuine} {
		out.sizes[0] = copy(out.bufs[0], m)
		h.b.receiveBatch(out, 1, h.now)
	}
	if h.tunB.written != 2 || h.b.drops.Get(Outside, ReasonBadTag) != 1 {
		t.Fatalf("written %d, bad tag drops %d; want 2 and 1", h.tunB.written, h.b.drops.Get(Outside, ReasonBadTag))
	}
}

func refill(b *insideBatch, pkt []byte) *insideBatch {
	copy(b.bufs[0][bufHeadroom:], pkt)
	b.sizes[0] = len(pkt)
	return b
}

// TestOutsideGarbage: every kind of bad datagram is dropped with its own
// reason and nothing reaches the TUN.
func TestOutsideGarbage(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	out := h.b.newOutsideBatch()
	transport := func(idx byte, n int) []byte {
		m := make([]byte, n)
		m[0] = bhcrypto.MsgTransport
		m[4] = idx
		return m
	}
	cases := []struct {
		name string
		msg  []byte
		want Reason
	}{
		{"empty", nil, ReasonRunt},
		{"three bytes", []byte{4, 0, 0}, ReasonRunt},
		{"short transport", transport(2, 20), ReasonRunt},
		{"unknown type", []byte{9, 0, 0, 0, 1, 2, 3, 4}, ReasonUnknownType},
		{"reserved bits set", append([]byte{4, 0, 1, 0}, make([]byte, 40)...), ReasonUnknownType},
		{"unknown index", transport(77, 64), ReasonUnknownIndex},
		{"bad tag", transport(2, 64), ReasonBadTag},
		{"short initiation", append([]byte{1, 0, 0, 0}, make([]byte, 20)...), ReasonBadSize},
		{"long response", append([]byte{2, 0, 0, 0}, make([]byte, 200)...), ReasonBadSize},
	}
	for _, tc := range cases {
		before := h.b.drops.Get(Outside, tc.want)
		out.sizes[0] = copy(out.bufs[0], tc.msg)
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
		if got := h.b.drops.Get(Outside, tc.want); got != before+1 {
			t.Errorf("%s: %s drops went %d -> %d, want +1", tc.name, tc.want, before, got)
		}
	}
	if h.tunB.written != 0 {
		t.Fatalf("garbage reached the TUN")
	}
}

func benchmarkInside(b *testing.B, size int) {
	h := newHotPair(b, bhcrypto.AESGCM)
	h.bindA.discard = true
	pkt := udpPacket(b, podA, podB, make([]byte, size-28))
	in := h.a.newInsideBatch()
	refill(in, pkt)
	b.SetBytes(int64(size))
	b.ReportAllocs()
	for b.Loop() {
		// Sealing is in place: restore the headers routing reads (the
		// rest may stay ciphertext; sealing costs the same), so the loop
		// measures the router and the seal, not a 1420-byte copy.
		copy(in.bufs[0][bufHeadroom:bufHeadroom+28], pkt[:28])
		h.a.routeBatch(in, 1, h.now)
	}
}

// BenchmarkSealRoute measures the inside path per packet: parse, route,
// pad, seal in place, hand to the bind (which discards). Compare with
// crypto's BenchmarkBareAEADSeal of the same size.
func BenchmarkSealRoute64(b *testing.B)   { benchmarkInside(b, 64) }
func BenchmarkSealRoute512(b *testing.B)  { benchmarkInside(b, 512) }
func BenchmarkSealRoute1420(b *testing.B) { benchmarkInside(b, 1420) }

// BenchmarkOpenCheck1420 measures the outside path per packet: open,
// replay check, source and destination checks, hand to the TUN. Each
// iteration also seals the packet on A (subtract BenchmarkSealRoute1420).
func BenchmarkOpenCheck1420(b *testing.B) {
	h := newHotPair(b, bhcrypto.AESGCM)
	pkt := udpPacket(b, podA, podB, make([]byte, 1420-28))
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	b.SetBytes(1420)
	b.ReportAllocs()
	for b.Loop() {
		h.a.routeBatch(refill(in, pkt), 1, h.now)
		out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
	}
}

// TestFloodPathAllocs: the outside path drops garbage and bad-MAC
// handshake messages without allocating, so a flood cannot grow the heap.
func TestFloodPathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	out := h.b.newOutsideBatch()
	badMAC := make([]byte, bhcrypto.InitiationSize)
	badMAC[0] = bhcrypto.MsgInitiation
	for i := 4; i < len(badMAC); i++ {
		badMAC[i] = byte(i * 7)
	}
	garbage := []byte{4, 0, 0, 0, 9, 9, 9, 9, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	for _, msg := range [][]byte{badMAC, garbage, {7, 0, 0}} {
		n := testing.AllocsPerRun(1000, func() {
			out.sizes[0] = copy(out.bufs[0], msg)
			out.eps[0] = h.bindA.local
			h.b.receiveBatch(out, 1, h.now)
		})
		if n != 0 {
			t.Errorf("dropping % x...: %.1f allocations per datagram", msg[:4], n)
		}
	}
	if h.b.drops.Get(Outside, ReasonBadMAC) < 1000 || h.b.Handshakes().DH != 0 {
		t.Fatalf("bad-MAC drops %d, DH %d", h.b.drops.Get(Outside, ReasonBadMAC), h.b.Handshakes().DH)
	}
}

// failingTUN writes like the water backend: one packet at a time,
// stopping at the first that fails (every packet whose first byte after
// the offset is bad), and reports how many it wrote before it.
type failingTUN struct {
	nullTUN
	bad     byte
	written [][]byte
}

func (d *failingTUN) Write(bufs [][]byte, off int) (int, error) {
	for i, b := range bufs {
		if b[len(b)-1] == d.bad {
			return i, errors.New("invalid argument")
		}
		d.written = append(d.written, append([]byte(nil), b[off:]...))
	}
	return len(bufs), nil
}

// TestWriteTUNPartial: when the TUN refuses one packet of a batch, only
// that packet is dropped and counted; the rest of the batch is written.
func TestWriteTUNPartial(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	dev := &failingTUN{nullTUN: nullTUN{batch: 64}, bad: 0xee}
	h.b.tun.Device = dev
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	payloads := []byte{1, 2, 0xee, 4, 0xee, 6}
	for i, pl := range payloads {
		h.a.routeBatch(refill(in, udpPacket(t, podA, podB, []byte{pl})), 1, h.now)
		out.sizes[i] = copy(out.bufs[i], h.bindA.last[:h.bindA.n])
		out.eps[i] = h.bindA.local
	}
	h.b.receiveBatch(out, len(payloads), h.now)
	if got := h.b.drops.Get(Outside, ReasonTUNWriteError); got != 2 {
		t.Errorf("tun_write_error drops %d, want 2", got)
	}
	var got []byte
	for _, p := range dev.written {
		got = append(got, p[len(p)-1])
	}
	if !bytes.Equal(got, []byte{1, 2, 4, 6}) {
		t.Errorf("written payloads % x, want 01 02 04 06", got)
	}
}
