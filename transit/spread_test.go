package transit

import (
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// hubOf sends one relayed datagram of flow from E1 to E2 and returns the
// hub gateway it went to (None: none), emptying the network.
func hubOf(t *testing.T, w *world, net *fakeNet, b *Bind, datagram []byte, flow uint64) GatewayID {
	t.Helper()
	if err := b.SendFlows([][]byte{datagram}, []uint64{flow}, PseudoEndpoint(gwE2)); err != nil {
		t.Fatal(err)
	}
	net.mu.Lock()
	defer net.mu.Unlock()
	got := None
	for _, h := range []GatewayID{gwHub, gwHub2} {
		if n := len(net.q[addr(h)]); n > 0 {
			if got != None || n != 1 {
				t.Fatalf("flow %d: sent to both hubs or twice", flow)
			}
			got = h
		}
	}
	clear(net.q)
	return got
}

// TestSpreadFlows: relayed flows spread over the hub gateways that are
// up by the flow hash, each flow stays on one, and when one goes down
// only its flows move; with none up, those with a session carry them.
// What goes through a hub is counted as traffic toward it.
func TestSpreadFlows(t *testing.T) {
	w, net, binds := bindWorld(t)
	buf, n := sealInner(t, w.e2e[0], []byte("pod e1 to pod e2"))
	datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
	const flows = 64
	first := map[uint64]GatewayID{}
	per := map[GatewayID]int{}
	for f := range uint64(flows) {
		flow := f * 0x9e3779b97f4a7c15
		h := hubOf(t, w, net, binds[gwE1], datagram, flow)
		first[flow] = h
		per[h]++
		if again := hubOf(t, w, net, binds[gwE1], datagram, flow); again != h {
			t.Fatalf("flow %x went through %d, then %d", flow, h, again)
		}
	}
	if per[gwHub] < flows/4 || per[gwHub2] < flows/4 {
		t.Fatalf("flows per hub gateway: %v, want both used", per)
	}
	if got := w.relayed[gwE1][gwHub] + w.relayed[gwE1][gwHub2]; got != 2*flows {
		t.Fatalf("noted %d relayed datagrams, want %d", got, 2*flows)
	}
	via, relayed := binds[gwE1].Via(PseudoEndpoint(gwE2))
	if !relayed || len(via) != 2 {
		t.Fatalf("Via = %v, %v; want both hub gateways", via, relayed)
	}

	w.down[gwE1][gwHub] = true
	for flow := range first {
		if got := hubOf(t, w, net, binds[gwE1], datagram, flow); got != gwHub2 {
			t.Fatalf("hub gateway 0 down: flow %x went to %d", flow, got)
		}
	}
	if via, _ := binds[gwE1].Via(PseudoEndpoint(gwE2)); len(via) != 1 || via[0] != w.plan.Gateway(gwHub2) {
		t.Fatalf("Via with one hub down = %v", via)
	}
	w.down[gwE1][gwHub2] = true
	if via, _ := binds[gwE1].Via(PseudoEndpoint(gwE2)); len(via) != 2 {
		t.Fatalf("Via with both hubs down = %v, want both (sessions)", via)
	}
	// Back up: every flow returns to its first hub gateway.
	clear(w.down[gwE1])
	for flow, h := range first {
		if got := hubOf(t, w, net, binds[gwE1], datagram, flow); got != h {
			t.Fatalf("flow %x back on %d, was on %d", flow, got, h)
		}
	}
	// A direct endpoint is not relayed.
	if _, relayed := binds[gwE1].Via(addr(gwHub)); relayed {
		t.Fatal("a direct endpoint reported as relayed")
	}
}
