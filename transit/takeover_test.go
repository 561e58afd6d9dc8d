package transit

import (
	"net/netip"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// deliverHint has hub tell spoke that gateway named is at at, in the
// hub's session with spoke, and lets spoke's Bind read it.
func deliverHint(t *testing.T, w *world, net *fakeNet, binds [numTestGateways]*Bind, hub, spoke, named GatewayID, at netip.AddrPort) {
	t.Helper()
	kp, _, _ := w.sess[hub].Current(spoke)
	msg, ok := hintMessage(kp, w.plan.KeyID(named), at)
	if !ok {
		t.Fatal("hint not sealed")
	}
	inject(net, spoke, msg, addr(hub))
	if got, _ := receiveAll(t, binds[spoke]); len(got) != 0 {
		t.Fatalf("the spoke's router got %d datagrams from a hint", len(got))
	}
}

// inject puts b on its way to gateway to, from from.
func inject(net *fakeNet, to GatewayID, b []byte, from netip.AddrPort) {
	net.mu.Lock()
	defer net.mu.Unlock()
	net.q[addr(to)] = append(net.q[addr(to)], fakeDatagram{append([]byte(nil), b...), from})
}

// TestHintCannotTakeOverDirectPeer: a hub's hint naming a directly
// reached gateway's address (here the other hub gateway's) for a relayed
// one is refused and counted, and that gateway's datagrams still reach
// the router from its own address, not from the relayed gateway's stand-in.
func TestHintCannotTakeOverDirectPeer(t *testing.T) {
	w, net, binds := bindWorld(t)
	deliverHint(t, w, net, binds, gwHub, gwE1, gwE2, addr(gwHub2))
	if c := w.relay[gwE1].Counts().Get(ReasonHintRefused); c != 1 {
		t.Errorf("hints refused: %d, want 1", c)
	}
	if _, ok := w.relay[gwE1].view.Load().fromCandidate(addr(gwHub2)); ok {
		t.Error("a directly reached gateway's address became a relayed gateway's mapping")
	}
	// gwHub2's own datagram (its session with E1) arrives from its address.
	kp, _, _ := w.sess[gwHub2].Current(gwE1)
	buf, n := sealInner(t, kp, []byte("from the second hub gateway"))
	inject(net, gwE1, buf[bhcrypto.RelayHeaderSize:bhcrypto.RelayHeaderSize+n], addr(gwHub2))
	if got, eps := receiveAll(t, binds[gwE1]); len(got) != 1 || eps[0] != addr(gwHub2) {
		t.Fatalf("gwHub2's datagram reached the router from %v, want %v", eps, addr(gwHub2))
	}
}

// TestCandidateRewriteBySession: once a hint gave E2's mapping, only a
// transport message of E1's session with E2 from there is seen from E2's
// stand-in; another session's datagram, a handshake message or an
// unknown index from that address reach the router from the address
// itself, where its own rules apply.
func TestCandidateRewriteBySession(t *testing.T) {
	w, net, binds := bindWorld(t)
	mapping := netip.MustParseAddrPort("203.0.113.7:40000")
	deliverHint(t, w, net, binds, gwHub, gwE1, gwE2, mapping)
	if gw, ok := w.relay[gwE1].view.Load().fromCandidate(mapping); !ok || gw != gwE2 {
		t.Fatalf("hint not taken: %v %v", gw, ok)
	}
	seal := func(kp *bhcrypto.Keypair) []byte {
		buf, n := sealInner(t, kp, []byte("payload"))
		return buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	}
	hub2, _, _ := w.sess[gwHub2].Current(gwE1)
	forged := seal(w.e2e[1])
	forged[4] ^= 0xff // an index of no session
	initiation := make([]byte, bhcrypto.InitiationSize)
	initiation[0] = bhcrypto.MsgInitiation
	for _, tc := range []struct {
		name string
		msg  []byte
		want netip.AddrPort
	}{
		{"E2's session", seal(w.e2e[1]), PseudoEndpoint(gwE2)},
		{"another gateway's session", seal(hub2), mapping},
		{"unknown index", forged, mapping},
		{"handshake initiation", initiation, mapping},
	} {
		inject(net, gwE1, tc.msg, mapping)
		got, eps := receiveAll(t, binds[gwE1])
		if len(got) != 1 || eps[0] != tc.want {
			t.Errorf("%s: reached the router from %v, want %v", tc.name, eps, tc.want)
		}
	}
}

// TestHintOnlyFromTheHubsOfThePair: a hint is taken only from a hub
// gateway we reach the named gateway through, about a gateway we reach
// through a hub at all.
func TestHintOnlyFromTheHubsOfThePair(t *testing.T) {
	w, net, binds := bindWorld(t)
	mapping := netip.MustParseAddrPort("203.0.113.7:40000")
	// X relays through nothing: E2 reaches it directly, so a hint
	// about it (from a hub E2 uses) must not give it a mapping.
	deliverHint(t, w, net, binds, gwHub, gwE2, gwX, mapping)
	if _, ok := w.relay[gwE2].view.Load().fromCandidate(mapping); ok {
		t.Error("a hint about a directly reached gateway was taken")
	}
}

// TestDeferRelay: a Bind told to DeferRelay (the router's real-time
// express socket) hands relay messages back whole and unread, forwarding
// nothing; Process, on another goroutine, then does what Receive would
// have: the hub forwards, the spoke gets the datagram from the origin's
// stand-in.
func TestDeferRelay(t *testing.T) {
	w, net, binds := bindWorld(t)
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	w.down[gwE1][gwHub2] = true // through gwHub
	if err := binds[gwE1].Send([][]byte{datagram}, PseudoEndpoint(gwE2)); err != nil {
		t.Fatal(err)
	}
	hub := binds[gwHub]
	hub.DeferRelay()
	bufs := make([][]byte, 8)
	for i := range bufs {
		bufs[i] = make([]byte, 1500, 2048)
	}
	sizes, eps := make([]int, 8), make([]netip.AddrPort, 8)
	got, err := hub.Receive(bufs, sizes, eps)
	if err != nil || got != 1 || bufs[0][0] != bhcrypto.MsgRelay {
		t.Fatalf("deferred: %d datagrams (%v), first of type %d; want the relay message back", got, err, bufs[0][0])
	}
	if q := queued(net, addr(gwE2)); q != 0 || w.relay[gwHub].Counts().Get(Forwarded) != 0 {
		t.Fatal("the hub forwarded on the deferring goroutine")
	}
	if kept := hub.Process(bufs, sizes, eps, got); kept != 0 {
		t.Fatalf("Process kept %d for the hub's router", kept)
	}
	if q := queued(net, addr(gwE2)); q != 2 {
		t.Fatalf("%d datagrams at E2 after Process, want the forward and the hub's hint", q)
	}
	out, from := receiveAll(t, binds[gwE2])
	if len(out) != 1 || from[0] != PseudoEndpoint(gwE1) {
		t.Fatalf("E2 got %d from %v", len(out), from)
	}
}

// BenchmarkDirectFrom is the receive path's check of a datagram from a
// candidate address: the candidate map, the receiver index's session and
// its gateway (was the map alone, BenchmarkFromCandidate).
func BenchmarkDirectFrom(b *testing.B) {
	w, net, binds := bindWorld(b)
	mapping := netip.MustParseAddrPort("203.0.113.7:40000")
	kp, _, _ := w.sess[gwHub].Current(gwE1)
	hint, _ := hintMessage(kp, w.plan.KeyID(gwE2), mapping)
	net.q[addr(gwE1)] = append(net.q[addr(gwE1)], fakeDatagram{hint, addr(gwHub)})
	bufs := [][]byte{make([]byte, 2048)}
	if _, err := binds[gwE1].Receive(bufs, make([]int, 1), make([]netip.AddrPort, 1)); err != nil {
		b.Fatal(err)
	}
	buf, n := sealInner(b, w.e2e[1], make([]byte, 1380))
	msg := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	v := w.relay[gwE1].view.Load()
	b.ReportAllocs()
	for b.Loop() {
		if gw, ok := binds[gwE1].directFrom(v, msg, mapping); !ok || gw != gwE2 {
			b.Fatal("not rewritten")
		}
	}
}
