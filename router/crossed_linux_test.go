package router

import (
	"net/netip"
	"regexp"
	"sync"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// TestLaneFlagsCrossedPair: two gateways that start sending to each other
// at the same moment both initiate, and often end up sending on
// different sessions (each on the one it confirmed last). Each must
// still learn, and keep, that the other reads lane bytes and has an
// express lane on the session it sends on, through many rounds of
// probes both ways; a pair that booked the flags of the other's probes
// (which arrive on its previous session) flipped back to lane byte 0 at
// every one of them. TestLaneFlagsCrossedSessions is the same rule in
// one router.
func TestLaneFlagsCrossedPair(t *testing.T) {
	a, b, clock := crossedPair(t)
	pa := a.r.state.Load().peers[b.id.Public]
	pb := b.r.state.Load().peers[a.id.Public]
	for round := range 10 {
		ra, rb := pa.live.probeReplies.Load(), pb.live.probeReplies.Load()
		clock.Advance(IdleProbeFactor * DefaultProbeInterval)
		// Both probes answered: each side has also read the other's.
		waitFor(t, "both probes answered", func() bool {
			return pa.live.probeReplies.Load() > ra && pb.live.probeReplies.Load() > rb
		})
		for _, s := range []struct {
			name string
			p    *Peer
		}{{"A", pa}, {"B", pb}} {
			want := laneTag(s.p.current.Load())
			if got := s.p.laneSession.Load(); got != want {
				t.Errorf("round %d: %s books lane bytes for session %#x, sends on %#x", round, s.name, got, want)
			}
			if got := s.p.expressSession.Load(); got != want {
				t.Errorf("round %d: %s books the express lane for session %#x, sends on %#x", round, s.name, got, want)
			}
		}
	}
	// An operator sees it: both features on at both ends.
	on := regexp.MustCompile(`(?m)^bridgehead_peer_session_features\{feature="(lane_bytes|express)",.*\} 1$`)
	for _, g := range []*gateway{a, b} {
		if got := on.FindAllString(scrape(t, g.r), -1); len(got) != 2 {
			t.Errorf("%s: features on in the metrics %q, want lane_bytes and express", g.tun.Name(), got)
		}
	}
}

// crossedPair returns a loopback pair, each router with an express lane,
// whose sessions crossed: each sends on a session the other does not.
// Both start sending at once; over loopback most attempts cross.
func crossedPair(t *testing.T) (a, b *gateway, clock *fakeClock) {
	t.Helper()
	for range 50 {
		clock = newFakeClock()
		a, b = newExpressLoopbackPair(t, clock)
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); a.tun.Inject(udpPacket(t, podA, podB, []byte("hi"))) }()
		go func() { defer wg.Done(); b.tun.Inject(udpPacket(t, podB, podA, []byte("hi"))) }()
		wg.Wait()
		b.expectPacket(t)
		a.expectPacket(t)
		ka := a.r.state.Load().peers[b.id.Public].current.Load()
		kb := b.r.state.Load().peers[a.id.Public].current.Load()
		if ka.RemoteIndex != kb.LocalIndex {
			return a, b, clock
		}
		a.close(t)
		b.close(t)
	}
	t.Fatal("50 simultaneous starts, and every one agreed on one session")
	return nil, nil, nil
}

// newExpressLoopbackPair is newLoopbackPair with an express socket group
// (one lane socket and the express socket) on each side, so that each
// says flagExpress in its probes.
func newExpressLoopbackPair(t *testing.T, clock Clock) (a, b *gateway) {
	t.Helper()
	gws := newGateways(t, bhcrypto.AESGCM, clock, "bh-a", "bh-b")
	for _, g := range gws {
		x := g.useExpressGroup(t)
		g.opts = func(o *Options) { o.Express = x }
	}
	a, b = gws[0], gws[1]
	a.start(t, twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr()))
	b.start(t, twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr()))
	return a, b
}

// useExpressGroup replaces g's socket with a loopback express group of
// one lane socket (g's bind from now on) and the express socket, which
// it returns for g.opts to pass as Options.Express. Before g.start.
func (g *gateway) useExpressGroup(t *testing.T) *udp.LinuxBind {
	t.Helper()
	g.bind.Close()
	lanes, x, err := udp.ListenExpress(netip.MustParseAddrPort("127.0.0.1:0"), 1, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g.bind = lanes[0]
	return x
}
