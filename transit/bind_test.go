package transit

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// fakeNet is a lossless switchboard of binds by address; Receive does not
// block.
type fakeNet struct {
	mu sync.Mutex
	q  map[netip.AddrPort][]fakeDatagram
}

type fakeDatagram struct {
	b    []byte
	from netip.AddrPort
}

type fakeBind struct {
	net  *fakeNet
	addr netip.AddrPort
}

func (f *fakeBind) Send(bufs [][]byte, ep netip.AddrPort) error {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	for _, b := range bufs {
		f.net.q[ep] = append(f.net.q[ep], fakeDatagram{bytes.Clone(b), f.addr})
	}
	return nil
}

func (f *fakeBind) Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	f.net.mu.Lock()
	defer f.net.mu.Unlock()
	n := 0
	for n < len(bufs) && len(f.net.q[f.addr]) > 0 {
		d := f.net.q[f.addr][0]
		f.net.q[f.addr] = f.net.q[f.addr][1:]
		sizes[n], eps[n] = copy(bufs[n], d.b), d.from
		n++
	}
	return n, nil
}

func (f *fakeBind) BatchSize() int            { return 8 }
func (f *fakeBind) LocalAddr() netip.AddrPort { return f.addr }
func (f *fakeBind) Close() error              { return nil }

var _ udp.Bind = (*fakeBind)(nil)

// keyTable is one world gateway's sessions as the router's SessionTable.
type keyTable struct {
	w  *world
	gw GatewayID
}

func (k keyTable) SessionByIndex(idx uint32) (*bhcrypto.Keypair, bhcrypto.PublicKey, bool) {
	e, ok := k.w.sess[k.gw].byIndex[idx]
	if !ok {
		return nil, bhcrypto.PublicKey{}, false
	}
	return e.kp, k.w.plan.Gateway(e.gw).Key, true
}

func (k keyTable) CurrentSession(key bhcrypto.PublicKey) (*bhcrypto.Keypair, netip.AddrPort, bool) {
	id, ok := k.w.plan.ByKey(key)
	if !ok {
		return nil, netip.AddrPort{}, false
	}
	e, ok := k.w.sess[k.gw].current[id]
	return e.kp, e.to, ok
}

func (k keyTable) PeerUp(key bhcrypto.PublicKey) bool {
	id, ok := k.w.plan.ByKey(key)
	return ok && !k.w.down[k.gw][id]
}

func (k keyTable) NoteRelayed(key bhcrypto.PublicKey, n, bytes uint64) {
	id, _ := k.w.plan.ByKey(key)
	k.w.relayed[k.gw][id] += n
}

// bindWorld gives each world gateway a Bind on a fakeNet.
func bindWorld(t testing.TB) (*world, *fakeNet, [numTestGateways]*Bind) {
	w := newWorld(t, bhcrypto.ChaChaPoly)
	net := &fakeNet{q: map[netip.AddrPort][]fakeDatagram{}}
	var binds [numTestGateways]*Bind
	for g := range numTestGateways {
		r, err := New(nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		w.down[g], w.relayed[g] = map[GatewayID]bool{}, map[GatewayID]uint64{}
		binds[g] = NewBind(&fakeBind{net, addr(g)}, keyTable{w, g}, r, 1420)
		r.SetPlan(w.plan, g)
		w.relay[g] = r
	}
	return w, net, binds
}

func receiveAll(t *testing.T, b *Bind) ([][]byte, []netip.AddrPort) {
	t.Helper()
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 2048)
	}
	sizes, eps := make([]int, 8), make([]netip.AddrPort, 8)
	n, err := b.Receive(bufs, sizes, eps)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]byte
	for i := range n {
		out = append(out, bufs[i][:sizes[i]])
	}
	return out, eps[:n]
}

// TestBindRelay: what E1's router sends to E2's pseudo endpoint reaches
// E2's router as sent, from E1's pseudo endpoint, through the hub, whose
// router sees nothing of it; direct traffic passes untouched.
func TestBindRelay(t *testing.T) {
	w, _, binds := bindWorld(t)
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	if err := binds[gwE1].Send([][]byte{datagram, datagram}, PseudoEndpoint(gwE2)); err != nil {
		t.Fatal(err)
	}
	if err := binds[gwE1].Send([][]byte{[]byte("direct")}, addr(gwHub)); err != nil {
		t.Fatal(err)
	}
	got, eps := receiveAll(t, binds[gwHub])
	if len(got) != 1 || string(got[0]) != "direct" || eps[0] != addr(gwE1) {
		t.Fatalf("the hub's router got %q from %v, want only the direct datagram", got, eps)
	}
	got, eps = receiveAll(t, binds[gwE2])
	if len(got) != 2 {
		t.Fatalf("E2 got %d datagrams", len(got))
	}
	for i := range got {
		if !bytes.Equal(got[i], datagram) || eps[i] != PseudoEndpoint(gwE1) {
			t.Fatalf("E2 got %x from %v", got[i], eps[i])
		}
	}
	// The second copy repeats the inner counter: the router's replay
	// window, not the relay, refuses it. The relay counted both.
	if d := w.relay[gwE2].Counts().Get(Delivered); d != 2 {
		t.Fatalf("delivered %d", d)
	}
	if f := w.relay[gwHub].Counts().Get(Forwarded); f != 2 {
		t.Fatalf("forwarded %d", f)
	}

	// SendMany mixes both.
	if err := binds[gwE2].SendMany([][]byte{datagram, []byte("to the hub")}, []netip.AddrPort{PseudoEndpoint(gwE1), addr(gwHub)}); err != nil {
		t.Fatal(err)
	}
	got, _ = receiveAll(t, binds[gwHub])
	if len(got) != 1 || string(got[0]) != "to the hub" {
		t.Fatalf("hub got %q", got)
	}
	got, eps = receiveAll(t, binds[gwE1])
	if len(got) != 1 || !bytes.Equal(got[0], datagram) || eps[0] != PseudoEndpoint(gwE2) {
		t.Fatalf("E1 got %q from %v", got, eps)
	}

	// No hub for a site that relays through none.
	if err := binds[gwX].Send([][]byte{datagram}, PseudoEndpoint(gwE2)); err == nil {
		t.Fatal("X relayed without a hub")
	}
}

// TestBindOriginMismatch: a hub naming another origin than the gateway
// whose session the datagram is for is caught at the spoke.
func TestBindOriginMismatch(t *testing.T) {
	w, net, binds := bindWorld(t)
	// The hub passes a datagram of E1's session with E2 on as if it
	// came from X, which for this test relays through the hub too.
	plan, err := NewPlan(func() []Gateway {
		var gws []Gateway
		for g := range numTestGateways {
			gws = append(gws, w.plan.Gateway(g))
		}
		return gws
	}(), map[string][]string{"e1": {"aks"}, "e2": {"aks"}, "x": {"aks"}})
	if err != nil {
		t.Fatal(err)
	}
	w.plan = plan
	for g := range numTestGateways {
		w.relay[g].SetPlan(plan, g)
	}
	buf, n := sealInner(t, w.e2e[0], []byte("sealed by e1"))
	hubToE2, _, _ := w.sess[gwHub].Current(gwE2)
	msg, err := hubToE2.SealRelay(buf, n, plan.KeyID(gwX))
	if err != nil {
		t.Fatal(err)
	}
	net.q[addr(gwE2)] = append(net.q[addr(gwE2)], fakeDatagram{msg, addr(gwHub)})
	if got, _ := receiveAll(t, binds[gwE2]); len(got) != 0 {
		t.Fatalf("E2's router got %q", got)
	}
	if m := w.relay[gwE2].Counts().Get(ReasonOriginMismatch); m != 1 {
		t.Fatalf("origin mismatches %d", m)
	}
}

func TestPseudoEndpoint(t *testing.T) {
	for _, id := range []GatewayID{0, 1, 255, 256, 1<<31 - 1} {
		ep := PseudoEndpoint(id)
		if got, ok := PseudoGateway(ep); !ok || got != id {
			t.Fatalf("%d -> %v -> %d %v", id, ep, got, ok)
		}
	}
	for _, ep := range []string{"[100::1]:2", "[101::1]:1", "1.0.0.1:1", "[2001:db8::1]:1"} {
		if _, ok := PseudoGateway(netip.MustParseAddrPort(ep)); ok {
			t.Fatalf("%s taken for a pseudo endpoint", ep)
		}
	}
}

// hubInner is a hub's socket for the forward tests: each Receive hands
// out a fresh batch of relay messages from E1 (toward E2) and E2 (toward
// E1) in the order of from, resealed for the hub so the replay window
// takes them; SendMany records where each forward went and the inner
// counter it carries. Neither allocates.
type hubInner struct {
	tmpl  [][]byte // relay messages, by position in the batch
	from  []GatewayID
	kps   map[GatewayID]*bhcrypto.Keypair // spoke's session with the hub
	keyID map[GatewayID]bhcrypto.KeyID    // the other spoke's
	calls int
	eps   []netip.AddrPort
	ctrs  []uint64
	sizes []int
}

func (h *hubInner) Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	n := min(len(bufs), len(h.tmpl))
	for i := range n {
		m := copy(bufs[i], h.tmpl[i])
		if _, err := h.kps[h.from[i]].SealRelay(bufs[i][:m], m-bhcrypto.RelayOverhead, h.keyID[h.from[i]]); err != nil {
			return 0, err
		}
		sizes[i], eps[i] = m, addr(h.from[i])
	}
	return n, nil
}

func (h *hubInner) SendMany(bufs [][]byte, eps []netip.AddrPort) error {
	h.calls++
	h.eps, h.ctrs, h.sizes = h.eps[:0], h.ctrs[:0], h.sizes[:0]
	for i, b := range bufs {
		_, ctr, _ := bhcrypto.ParseTransportHeader(b[bhcrypto.RelayHeaderSize:])
		h.eps, h.ctrs, h.sizes = append(h.eps, eps[i]), append(h.ctrs, ctr), append(h.sizes, len(b))
	}
	return nil
}

func (h *hubInner) Send(bufs [][]byte, ep netip.AddrPort) error { return errors.New("hubInner: Send") }
func (h *hubInner) BatchSize() int                              { return 64 }
func (h *hubInner) LocalAddr() netip.AddrPort                   { return addr(gwHub) }
func (h *hubInner) Close() error                                { return nil }

// newHubInner is a hub batch of E1's data (1380 bytes) and E2's
// acknowledgements (40 bytes), interleaved as in from.
func newHubInner(t testing.TB, w *world, from []GatewayID) *hubInner {
	h := &hubInner{
		from:  from,
		kps:   map[GatewayID]*bhcrypto.Keypair{gwE1: w.hubSession(gwE1, gwHub), gwE2: w.hubSession(gwE2, gwHub)},
		keyID: map[GatewayID]bhcrypto.KeyID{gwE1: w.plan.KeyID(gwE2), gwE2: w.plan.KeyID(gwE1)},
		eps:   make([]netip.AddrPort, 0, len(from)),
		ctrs:  make([]uint64, 0, len(from)),
		sizes: make([]int, 0, len(from)),
	}
	for _, f := range from {
		if f == gwE1 {
			h.tmpl = append(h.tmpl, w.wrap(t, gwE1, gwHub, gwE2, w.e2e[0], make([]byte, 1380)))
		} else {
			h.tmpl = append(h.tmpl, w.wrap(t, gwE2, gwHub, gwE1, w.e2e[1], make([]byte, 40)))
		}
	}
	return h
}

// TestBindForwardsByHop: a hub's batch mixing both directions goes out
// in one SendMany with each next hop's forwards adjacent (so the socket
// can segment them), in the order they came per hop, without allocating.
func TestBindForwardsByHop(t *testing.T) {
	w := newWorld(t, bhcrypto.AESGCM)
	from := []GatewayID{gwE1, gwE1, gwE2, gwE1, gwE2, gwE1, gwE1, gwE2, gwE1, gwE1}
	inner := newHubInner(t, w, from)
	b := NewBind(inner, keyTable{w, gwHub}, w.relay[gwHub], 1420)
	bufs := make([][]byte, len(from))
	for i := range bufs {
		bufs[i] = make([]byte, 1420+bhcrypto.TransportOverhead+bhcrypto.PaddingMultiple)
	}
	sizes, eps := make([]int, len(from)), make([]netip.AddrPort, len(from))
	// The first batch also carries the hub's hints to the pair
	// (direct.go), the second only the forwards.
	for range 2 {
		if n, err := b.Receive(bufs, sizes, eps); n != 0 || err != nil {
			t.Fatalf("the hub's router got %d datagrams (%v)", n, err)
		}
	}
	if inner.calls != 2 || len(inner.eps) != len(from) {
		t.Fatalf("%d SendMany calls for 2 batches, the second carrying %d forwards, want %d", inner.calls, len(inner.eps), len(from))
	}
	// E1's data to E2 first (the batch's first forward), then E2's
	// acknowledgements to E1; inner counters rising within each.
	nE2 := 0
	for _, f := range from {
		if f == gwE1 {
			nE2++
		}
	}
	for i, ep := range inner.eps {
		want := addr(gwE2)
		if i >= nE2 {
			want = addr(gwE1)
		}
		if ep != want {
			t.Fatalf("forward %d to %v, want %v (order %v)", i, ep, want, inner.eps)
		}
		if i > 0 && inner.eps[i-1] == ep && inner.ctrs[i] <= inner.ctrs[i-1] {
			t.Fatalf("forward %d to %v: counter %d after %d (%v)", i, ep, inner.ctrs[i], inner.ctrs[i-1], inner.ctrs)
		}
	}
	if allocs := testing.AllocsPerRun(200, func() {
		if n, err := b.Receive(bufs, sizes, eps); n != 0 || err != nil || len(inner.eps) != len(from) {
			panic(fmt.Sprintf("got %d (%v), forwarded %d", n, err, len(inner.eps)))
		}
	}); allocs != 0 {
		t.Fatalf("%.1f allocations per batch of %d forwards", allocs, len(from))
	}
}

func TestHopGroups(t *testing.T) {
	a, b, c := addr(gwE1), addr(gwE2), addr(gwX)
	for _, tc := range []struct {
		in, want []netip.AddrPort
	}{
		{nil, nil},
		{[]netip.AddrPort{a}, []netip.AddrPort{a}},
		{[]netip.AddrPort{a, a, a}, []netip.AddrPort{a, a, a}},
		{[]netip.AddrPort{a, b, a, b}, []netip.AddrPort{a, a, b, b}},
		{[]netip.AddrPort{b, a, c, a, b, c}, []netip.AddrPort{b, b, a, a, c, c}},
	} {
		bufs := make([][]byte, len(tc.in))
		for i := range bufs {
			bufs[i] = []byte{byte(i)}
		}
		eps := slices.Clone(tc.in)
		var g hopGroups
		g.group(bufs, eps)
		if !slices.Equal(eps, tc.want) {
			t.Errorf("%v grouped %v, want %v", tc.in, eps, tc.want)
		}
		for i := range bufs {
			// Each datagram still travels with its hop, order kept per hop.
			if tc.in[bufs[i][0]] != eps[i] || (i > 0 && eps[i] == eps[i-1] && bufs[i][0] < bufs[i-1][0]) {
				t.Errorf("%v: datagram %d (was %d) to %v", tc.in, i, bufs[i][0], eps[i])
			}
		}
	}
}

// TestSendFlowsByHub: a spoke's batch whose flows spread over two hub
// gateways reaches the socket in one SendMany with each hub's datagrams
// adjacent, in order per hub, without allocating.
func TestSendFlowsByHub(t *testing.T) {
	w := newWorld(t, bhcrypto.AESGCM)
	for g := range numTestGateways {
		w.down[g], w.relayed[g] = map[GatewayID]bool{}, map[GatewayID]uint64{}
	}
	inner := &hubInner{eps: make([]netip.AddrPort, 0, 16), ctrs: make([]uint64, 0, 16), sizes: make([]int, 0, 16)}
	b := NewBind(inner, keyTable{w, gwE1}, w.relay[gwE1], 1420)
	// Flows 0..15, each to the hub gateway ranking first for it.
	var cands []hubCand
	cands = b.candidates(gwE2, cands)
	if len(cands) != 2 {
		t.Fatalf("%d hub gateways toward E2, want 2", len(cands))
	}
	flows := make([]uint64, 16)
	bufs := make([][]byte, 16)
	hubOf := make([]netip.AddrPort, 16)
	for i := range flows {
		flows[i] = uint64(i) * 0x9e3779b97f4a7c15
		bufs[i] = []byte{bhcrypto.MsgTransport, 0, 0, 0, byte(i), 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
		hubOf[i] = cands[pickHub(cands, flows[i])].to
	}
	if err := b.SendFlows(bufs, flows, PseudoEndpoint(gwE2)); err != nil {
		t.Fatal(err)
	}
	if inner.calls != 1 || len(inner.eps) != len(bufs) {
		t.Fatalf("%d SendMany calls carrying %d datagrams", inner.calls, len(inner.eps))
	}
	var want []netip.AddrPort
	for _, first := range []netip.AddrPort{hubOf[0], cands[0].to, cands[1].to} {
		if !slices.Contains(want, first) {
			for _, h := range hubOf {
				if h == first {
					want = append(want, h)
				}
			}
		}
	}
	if !slices.Equal(inner.eps, want) {
		t.Fatalf("sent to %v, want %v", inner.eps, want)
	}
	if raceEnabled {
		return // sync.Pool drops scratch at random under the race detector
	}
	if allocs := testing.AllocsPerRun(100, func() {
		if err := b.SendFlows(bufs, flows, PseudoEndpoint(gwE2)); err != nil {
			panic(err)
		}
	}); allocs != 0 {
		t.Fatalf("%.1f allocations per SendFlows of %d datagrams", allocs, len(bufs))
	}
}

// BenchmarkHopGroups: the cost of grouping a full batch of 64 forwards by
// next hop, from one hop (the common case: returns at once) to 64 (a hub
// whose batch has one forward per spoke gateway, group's worst case).
func BenchmarkHopGroups(b *testing.B) {
	for _, hops := range []int{1, 4, 16, 64} {
		b.Run(fmt.Sprintf("hops=%d", hops), func(b *testing.B) {
			const n = 64
			in := make([]netip.AddrPort, n)
			for i := range in {
				in[i] = netip.AddrPortFrom(netip.AddrFrom4([4]byte{198, 51, 100, byte(i % hops)}), 51820)
			}
			bufs := make([][]byte, n)
			for i := range bufs {
				bufs[i] = []byte{byte(i)}
			}
			eps := make([]netip.AddrPort, n)
			var g hopGroups
			b.ReportAllocs()
			for b.Loop() {
				copy(eps, in)
				g.group(bufs, eps)
			}
		})
	}
}
