package transit

import (
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestHubSignalsNoSession: a hub gateway that has no session with the
// destination (it restarted, or its handshake with that spoke failed)
// used to drop its share of the relayed flows silently and for good: the
// spoke's probes of the destination take one hub gateway (flow 0), so
// the destination stays up while the flows on the other hub gateway are
// lost. Now the hub tells the sender, at most every NoSessionInterval per
// pair, and the sender moves that destination's flows off the hub
// gateway for NoSessionHold, then tries it again.
func TestHubSignalsNoSession(t *testing.T) {
	w, net, binds := bindWorld(t)
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	for _, r := range w.relay {
		r.now = clock.now
	}
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	const flows = 64
	first := map[uint64]GatewayID{}
	for f := range uint64(flows) {
		flow := f * 0x9e3779b97f4a7c15
		first[flow] = hubOf(t, w, net, binds[gwE1], datagram, flow)
	}

	// Hub gateway 2 loses its session with E2.
	delete(w.sess[gwHub2].current, gwE2)
	var lost uint64
	for flow, h := range first {
		if h == gwHub2 {
			lost = flow
			break
		}
	}
	if err := binds[gwE1].SendFlows([][]byte{datagram}, []uint64{lost}, PseudoEndpoint(gwE2)); err != nil {
		t.Fatal(err)
	}
	if got, _ := receiveAll(t, binds[gwHub2]); len(got) != 0 {
		t.Fatalf("the hub's router got %d datagrams", len(got))
	}
	if d := w.relay[gwHub2].Counts().Get(ReasonNoSession); d != 1 {
		t.Fatalf("no_session at the hub: %d, want 1", d)
	}
	if got, _ := receiveAll(t, binds[gwE1]); len(got) != 0 {
		t.Fatalf("E1's router got %d datagrams from the hub's signal", len(got))
	}
	if c := w.relay[gwE1].Counts().Get(Control); c != 1 {
		t.Fatalf("E1 took %d control messages, want the hub's signal", c)
	}
	for flow := range first {
		if got := hubOf(t, w, net, binds[gwE1], datagram, flow); got != gwHub {
			t.Fatalf("after the signal: flow %x went to %d, want hub gateway %d", flow, got, gwHub)
		}
	}
	if via, _ := binds[gwE1].Via(PseudoEndpoint(gwE2)); len(via) != 1 || via[0] != w.plan.Gateway(gwHub) {
		t.Fatalf("Via after the signal = %v", via)
	}

	// Only the hub gateway that said so is avoided, and only toward E2.
	if via, _ := binds[gwE2].Via(PseudoEndpoint(gwE1)); len(via) != 2 {
		t.Fatalf("E2's Via toward E1 = %v, want both hub gateways", via)
	}
	// Were every hub gateway to say so, they would all still carry the
	// flows (nothing better is left).
	v := w.relay[gwE1].view.Load()
	if !binds[gwE1].takeNoSession(v, gwHub, gwE2) {
		t.Fatal("a signal from a hub gateway of the pair refused")
	}
	if via, _ := binds[gwE1].Via(PseudoEndpoint(gwE2)); len(via) != 2 {
		t.Fatalf("Via with both hub gateways without a session = %v, want both", via)
	}
	v.noSession[gwE2][0].Store(0)
	if binds[gwE1].takeNoSession(v, gwE2, gwE2) || binds[gwE1].takeNoSession(v, gwX, gwE2) {
		t.Fatal("a signal from a gateway that is no hub of the pair taken")
	}

	// The hub signals a pair at most every NoSessionInterval.
	clear(net.q)
	hub2 := binds[gwHub2]
	relayTo := func() {
		t.Helper()
		msg := w.wrap(t, gwE1, gwHub2, gwE2, w.e2e[0], []byte("late"))
		inject(net, gwHub2, msg, addr(gwE1))
		receiveAll(t, hub2)
	}
	relayTo()
	relayTo()
	if q := queued(net, addr(gwE1)); q != 0 {
		t.Fatalf("the hub signalled %d times within NoSessionInterval of the first", q)
	}
	clock.t = clock.t.Add(NoSessionInterval)
	relayTo()
	if q := queued(net, addr(gwE1)); q != 1 {
		t.Fatalf("after NoSessionInterval the hub signalled %d times, want 1", q)
	}
	clear(net.q)

	// After NoSessionHold the flows try their hub gateway again; with
	// the session back, they stay.
	clock.t = clock.t.Add(NoSessionHold)
	w.sess[gwHub2].current[gwE2] = w.sess[gwHub2].byIndex[func() uint32 {
		for idx, e := range w.sess[gwHub2].byIndex {
			if e.gw == gwE2 {
				return idx
			}
		}
		t.Fatal("no session of hub gateway 2 with E2")
		return 0
	}()]
	for flow, h := range first {
		if got := hubOf(t, w, net, binds[gwE1], datagram, flow); got != h {
			t.Fatalf("after the hold: flow %x on %d, was on %d", flow, got, h)
		}
	}
}
