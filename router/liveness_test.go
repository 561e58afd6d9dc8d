package router

import (
	"net/netip"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// filterBind wraps a bind and drops the datagrams drop says to, on the way
// out: one direction of a path, as nftables does in the HA lab.
type filterBind struct {
	udp.Bind
	mu   sync.Mutex
	drop func(msg []byte, ep netip.AddrPort) bool
}

func (f *filterBind) setDrop(drop func(msg []byte, ep netip.AddrPort) bool) {
	f.mu.Lock()
	f.drop = drop
	f.mu.Unlock()
}

func (f *filterBind) Send(bufs [][]byte, ep netip.AddrPort) error {
	f.mu.Lock()
	drop := f.drop
	f.mu.Unlock()
	if drop == nil {
		return f.Bind.Send(bufs, ep)
	}
	keep := make([][]byte, 0, len(bufs))
	for _, b := range bufs {
		if !drop(b, ep) {
			keep = append(keep, b)
		}
	}
	if len(keep) == 0 {
		return nil // lost on the path: the sender cannot tell
	}
	return f.Bind.Send(keep, ep)
}

// newFilteredGateways is newMultiGateway with A's bind wrapped in a
// filterBind, every gateway up at A, and B1 and B2 each carrying flows.
func newFilteredGateways(t *testing.T, clock *fakeClock) (fa *filterBind, a, b1, b2 *gateway) {
	t.Helper()
	gws := make([]*gateway, 3)
	for i, name := range []string{"bh-a", "bh-b1", "bh-b2"} {
		g := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel(name, 1420), clock: clock}
		bind, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g.bind = bind
		gws[i] = g
	}
	a, b1, b2 = gws[0], gws[1], gws[2]
	fa = &filterBind{Bind: a.bind}
	a.bind = fa
	cfg := func(local string) *Config {
		return &Config{LocalSite: local, Sites: []SiteConfig{
			{Name: "site-a", Prefixes: siteAPrefixes, Gateways: []PeerConfig{{Name: "gw-a1", PublicKey: a.id.Public, Endpoint: fa.LocalAddr()}}},
			{Name: "site-b", Prefixes: siteBPrefixes, Gateways: []PeerConfig{
				{Name: "gw-b1", PublicKey: b1.id.Public, Endpoint: b1.bind.LocalAddr()},
				{Name: "gw-b2", PublicKey: b2.id.Public, Endpoint: b2.bind.LocalAddr()},
			}},
		}}
	}
	a.start(t, cfg("site-a"))
	b1.start(t, cfg("site-b"))
	b2.start(t, cfg("site-b"))
	waitUp(t, clock, a)
	return fa, a, b1, b2
}

// TestOneWayLoss: datagrams from A to B1 are dropped, while B1 to A still
// works and B1 keeps probing A (which answers). A must take B1 down within
// ProbeMisses probe intervals of traffic, keep it down however long B1
// keeps talking, and move its flows to B2. Before liveness counted only
// evidence that our packets arrive, B1's own probes kept it up forever.
func TestOneWayLoss(t *testing.T) {
	clock := newFakeClock()
	fa, a, b1, b2 := newFilteredGateways(t, clock)
	sendFlows(t, a, b1, b2, 16, 0)
	toB1 := b1.bind.LocalAddr()
	fa.setDrop(func(_ []byte, ep netip.AddrPort) bool { return ep == toB1 })
	a.tun.Inject(flowPacket(t, 0, 1)) // A is sending to site B: fast probes
	var downAfter time.Duration
	for elapsed := time.Duration(0); elapsed < 5*time.Second; elapsed += ProbeTick {
		if peerStats(a, "gw-b1").Live.State == LiveDown {
			downAfter = elapsed
			break
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
	}
	if st := peerStats(a, "gw-b1").Live; st.State != LiveDown {
		t.Fatalf("gw-b1 at A with A→B1 dropped: %+v", st)
	}
	if limit := (ProbeMisses+1)*DefaultProbeInterval + ProbeTick; downAfter > limit {
		t.Errorf("gw-b1 down %s after A→B1 was cut, want within %s", downAfter, limit)
	}
	t.Logf("one-way loss: gw-b1 down at A after %s (fake clock)", downAfter)
	// B1 keeps probing A (its probes arrive and A answers them), and B1
	// even sends data: none of it brings B1 back at A.
	rx := peerStats(a, "gw-b1").RxPackets
	for i := range 10 * int(DefaultProbeInterval/ProbeTick) {
		if i%10 == 0 {
			b1.tun.Inject(udpPacket(t, podB, podA, []byte("B1 to A works")))
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
		if st := peerStats(a, "gw-b1").Live; st.State != LiveDown {
			t.Fatalf("gw-b1 came back at A while A→B1 is still cut: %+v", st)
		}
	}
	if got := peerStats(a, "gw-b1").RxPackets - rx; got == 0 {
		t.Errorf("A heard nothing from gw-b1: the test did not exercise the path B1→A")
	}
	for f, gws := range sendFlows(t, a, b1, b2, 16, 2) {
		if gws["b1"] > 0 {
			t.Errorf("flow %d still sent to gw-b1", f)
		}
	}
	fa.setDrop(nil)
	waitUp(t, clock, a)
}
