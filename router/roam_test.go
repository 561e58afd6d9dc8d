package router

import (
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/transit"
)

// TestRoamNeverOntoStandIn: an authenticated datagram of a directly
// reached gateway moves it to a new real address (roaming), but never
// onto a stand-in (a relayed gateway's pseudo endpoint), where its
// datagrams would be handed to a hub for another gateway. A gateway
// configured at its stand-in stays there whatever address its datagrams
// come from (the relay path below chooses hub or direct), and never
// moves to another gateway's stand-in. Handshakes follow the same rule.
func TestRoamNeverOntoStandIn(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	out := h.b.newOutsideBatch()
	pA := h.b.state.Load().peers[h.a.keys.Load().Current.Public]
	in := h.a.newInsideBatch()
	deliver := func(from netip.AddrPort) {
		t.Helper()
		h.a.routeBatch(refill(in, udpPacket(t, podA, podB, []byte("x"))), 1, h.now)
		out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
		out.eps[0] = from
		h.b.receiveBatch(out, 1, h.now)
	}
	configured := pA.Endpoint()
	standIn := transit.PseudoEndpoint(7)
	deliver(standIn)
	if got := pA.Endpoint(); got != configured {
		t.Fatalf("a directly reached gateway moved onto a stand-in: %v", got)
	}
	roamed := netip.MustParseAddrPort("198.51.100.4:40000")
	deliver(roamed)
	if got := pA.Endpoint(); got != roamed {
		t.Fatalf("roaming to a real address: endpoint %v, want %v", got, roamed)
	}

	// A handshake from a stand-in does not move it either.
	_, msg, err := h.a.keys.Load().Current.CreateInitiation(h.b.keys.Load().Current.Public, 9, h.now)
	if err != nil {
		t.Fatal(err)
	}
	h.b.hs.handle(msg, transit.PseudoEndpoint(8), h.now, make([]byte, h.b.set.bufSize))
	if got := pA.Endpoint(); got != roamed {
		t.Fatalf("a handshake from a stand-in moved the gateway to %v", got)
	}

	// Now A is relayed: configured at its own stand-in.
	cfg := twoSiteConfig("site-b", h.a.keys.Load().Current.Public, h.b.keys.Load().Current.Public, standIn, h.bindB.local)
	if err := h.b.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	if pA.Endpoint() != standIn {
		t.Fatalf("reload: endpoint %v, want %v", pA.Endpoint(), standIn)
	}
	h.now = h.now.Add(time.Millisecond)
	for _, from := range []netip.AddrPort{roamed, transit.PseudoEndpoint(8)} {
		deliver(from)
		if got := pA.Endpoint(); got != standIn {
			t.Fatalf("a relayed gateway's datagram from %v moved it to %v, want its stand-in %v", from, got, standIn)
		}
	}
}
