package router

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// newMultiGateway starts gateway A of site-a and gateways B1 and B2 of
// site-b, on channel TUNs and loopback UDP, every one configured with the
// same catalog. clock may be nil.
func newMultiGateway(t *testing.T, clock Clock) (a, b1, b2 *gateway, cfg func(local string) *Config) {
	t.Helper()
	gws := newGateways(t, bhcrypto.AESGCM, clock, "bh-a", "bh-b1", "bh-b2")
	a, b1, b2 = gws[0], gws[1], gws[2]
	cfg = func(local string) *Config {
		return &Config{LocalSite: local, Sites: []SiteConfig{
			{Name: "site-a", Prefixes: siteAPrefixes, Gateways: []PeerConfig{{Name: "gw-a1", PublicKey: a.id.Public, Endpoint: a.bind.LocalAddr()}}},
			{Name: "site-b", Prefixes: siteBPrefixes, Gateways: []PeerConfig{
				{Name: "gw-b1", PublicKey: b1.id.Public, Endpoint: b1.bind.LocalAddr()},
				{Name: "gw-b2", PublicKey: b2.id.Public, Endpoint: b2.bind.LocalAddr()},
			}},
		}}
	}
	a.start(t, cfg("site-a"))
	b1.start(t, cfg("site-b"))
	b2.start(t, cfg("site-b"))
	return a, b1, b2, cfg
}

// flowPacket is a UDP packet of flow i from pod A to pod B; seq is in the
// payload.
func flowPacket(t *testing.T, flow, seq int) []byte { return flowPacketSeq(t, flow, seq) }

func flowPacketB(b *testing.B, flow int) []byte { return flowPacketSeq(b, flow, 0) }

func flowPacketSeq(tb testing.TB, flow, seq int) []byte {
	tb.Helper()
	p := udpPacket(tb, podA, podB, binary.BigEndian.AppendUint32(nil, uint32(seq)))
	binary.BigEndian.PutUint16(p[20:22], uint16(20000+flow)) // source port; the checksum is not checked
	return p
}

func flowOf(pkt []byte) int { return int(binary.BigEndian.Uint16(pkt[20:22])) - 20000 }

// collect reads packets from both site-B TUNs until want have arrived and
// returns which gateway delivered each flow.
func collect(t *testing.T, b1, b2 *gateway, want int) (by map[int]map[string]int) {
	t.Helper()
	by = make(map[int]map[string]int)
	note := func(gw string, p []byte) {
		f := flowOf(p)
		if by[f] == nil {
			by[f] = make(map[string]int)
		}
		by[f][gw]++
	}
	deadline := time.After(10 * time.Second)
	for n := 0; n < want; n++ {
		select {
		case p := <-b1.tun.Outbound():
			note("b1", p)
		case p := <-b2.tun.Outbound():
			note("b2", p)
		case <-deadline:
			t.Fatalf("only %d of %d packets arrived", n, want)
		}
	}
	return by
}

// sendFlows sends one packet of each of n flows from a and returns which
// of b1 and b2 delivered each.
func sendFlows(t *testing.T, a, b1, b2 *gateway, n, seq int) map[int]map[string]int {
	t.Helper()
	for f := range n {
		a.tun.Inject(flowPacket(t, f, seq))
	}
	return collect(t, b1, b2, n)
}

// waitUp waits until every peer of g is up.
func waitUp(t *testing.T, clock *fakeClock, g *gateway) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		all := true
		for _, p := range g.r.Peers() {
			all = all && p.Live.State == LiveUp
		}
		if all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("peers of %s not up: %+v", g.tun.Name(), g.r.Peers())
		}
		if clock != nil {
			clock.Advance(ProbeTick)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// TestFlowsSpreadAndStick: with two healthy gateways in site B, 64 flows
// from A spread over both, and every packet of a flow takes the same one.
// Sessions to both exist before the first packet (proactive).
func TestFlowsSpreadAndStick(t *testing.T) {
	clock := newFakeClock()
	a, b1, b2, _ := newMultiGateway(t, clock)
	waitUp(t, clock, a)
	// Traffic that found no session would make A initiate. A may still
	// answer the site-B gateways' own proactive initiations, which raced
	// with A's (each side sets up sessions before traffic): those are
	// not the traffic's, so only A's initiations count.
	hs := a.r.Handshakes().Initiated
	const flows, rounds = 64, 4
	for r := range rounds {
		for f := range flows {
			a.tun.Inject(flowPacket(t, f, r))
		}
	}
	by := collect(t, b1, b2, flows*rounds)
	share := map[string]int{}
	for f, gws := range by {
		if len(gws) != 1 {
			t.Errorf("flow %d split over gateways: %v", f, gws)
		}
		for gw := range gws {
			share[gw]++
		}
	}
	if share["b1"] < flows/5 || share["b2"] < flows/5 {
		t.Errorf("flows per gateway %v, want both to carry a share", share)
	}
	t.Logf("64 flows: %d on gw-b1, %d on gw-b2", share["b1"], share["b2"])
	if n := a.r.Handshakes().Initiated; n != hs {
		t.Errorf("traffic started %d handshakes; sessions should have been ready (%+v)", n-hs, a.r.Handshakes())
	}
}

// TestFailoverMovesOnlyItsFlows: when B1 dies, A marks it down after
// ProbeMisses probe intervals and its flows move to B2 while B2's flows
// stay; when B1 returns (a restart: same key, new sessions) it gets its
// flows back and B2 keeps the rest.
func TestFailoverMovesOnlyItsFlows(t *testing.T) {
	clock := newFakeClock()
	a, b1, b2, cfg := newMultiGateway(t, clock)
	waitUp(t, clock, a)
	send := func(seq int) map[int]map[string]int { return sendFlows(t, a, b1, b2, 32, seq) }
	before := send(0)
	onB1 := map[int]bool{}
	for f, gws := range before {
		onB1[f] = gws["b1"] > 0
	}

	addr := b1.bind.LocalAddr()
	b1.close(t)
	for range 2 * ProbeMisses * int(DefaultProbeInterval/ProbeTick) {
		if st := peerStats(a, "gw-b1").Live.State; st == LiveDown {
			break
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
	}
	if st := peerStats(a, "gw-b1").Live; st.State != LiveDown || st.Downs != 1 || st.LastChange.IsZero() {
		t.Fatalf("gw-b1 after its death: %+v", st)
	}
	during := send(1)
	for f, gws := range during {
		if gws["b1"] > 0 {
			t.Errorf("flow %d still sent to dead gw-b1", f)
		}
		if !onB1[f] && before[f]["b2"] == 0 {
			t.Errorf("flow %d was on neither gateway", f)
		}
	}

	// B1 restarts with the same key and address.
	bind, err := udp.Listen(addr, udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	old := peerStats(a, "gw-b1").SessionCreated
	b1 = &gateway{id: b1.id, tun: tun.NewChannel("bh-b1", 1420), clock: clock, bind: bind}
	b1.start(t, cfg("site-b"))
	waitUp(t, clock, a)
	// Up on B1's new handshake; its session is A's to send on once B1
	// used it (key confirmation, one round trip later).
	waitFor(t, "A sends on B1's new session", func() bool {
		clock.Advance(ProbeTick)
		return peerStats(a, "gw-b1").SessionCreated.After(old)
	})
	after := send(2)
	for f, gws := range after {
		if onB1[f] != (gws["b1"] > 0) {
			t.Errorf("flow %d: on gw-b1 before the failure %v, after its return %v", f, onB1[f], gws)
		}
	}
}

// TestProbes: a gateway we send data to is probed about once per probe
// interval while it says nothing back, answers each probe, and stays up;
// an idle one is probed IdleProbeFactor times less often.
func TestProbes(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, clock)
	waitUp(t, clock, a)
	waitUp(t, clock, b)
	ticks := int(DefaultProbeInterval / ProbeTick)
	run := func(intervals int, traffic bool) (probesA, probesB, replies uint64) {
		pa, pb := a.r.Peers()[0].Live, b.r.Peers()[0].Live
		for i := range intervals * ticks {
			if traffic && i%ticks == 0 {
				a.tun.Inject(udpPacket(t, podA, podB, []byte("one way")))
				b.expectPacket(t)
			}
			clock.Advance(ProbeTick)
			time.Sleep(time.Millisecond)
		}
		la, lb := a.r.Peers()[0].Live, b.r.Peers()[0].Live
		if la.State != LiveUp || lb.State != LiveUp {
			t.Errorf("states %s / %s, want up", la.State, lb.State)
		}
		return la.ProbesSent - pa.ProbesSent, lb.ProbesSent - pb.ProbesSent, la.ProbeReplies - pa.ProbeReplies
	}
	// One-way traffic A to B: A hears nothing back but probe replies.
	pa, pb, replies := run(10, true)
	if pa < 5 || pa > 11 || replies == 0 {
		t.Errorf("with traffic: A sent %d probes in 10 intervals (%d answered), want about 10", pa, replies)
	}
	t.Logf("with traffic: A %d probes, B %d, %d answered", pa, pb, replies)
	// Idle past ActiveWindow, then 30 intervals: about 3 probes each
	// way. Each side proves its own direction (the other's probes
	// prove only the path toward us), so both probe.
	run(int(ActiveWindow/DefaultProbeInterval), false)
	pa, pb, _ = run(30, false)
	if pa > 30/IdleProbeFactor+1 || pb > 30/IdleProbeFactor+1 {
		t.Errorf("idle: A %d, B %d probes in 30 intervals, want about %d each", pa, pb, 30/IdleProbeFactor)
	}
	b.expectNoPacket(t) // probes never reach the TUN
}

// pickSite is a site of n gateways that are up with a usable session.
func pickSite(tb testing.TB, n int, now time.Time) *site {
	s := &site{name: "b"}
	for i := range n {
		p := newPeer(PeerConfig{Site: "b", Name: fmt.Sprint("gw-", i), PublicKey: newIdentity(tb, bhcrypto.AESGCM).Public}, 1, 1500, time.Now, newMonoEpoch(now))
		p.current.Store(&bhcrypto.Keypair{Created: now})
		p.live.state.Store(uint32(LiveUp))
		s.gateways = append(s.gateways, p)
	}
	return s
}

// TestPickAllocs: choosing the gateway of a flow allocates nothing.
func TestPickAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	now := time.Now()
	s := pickSite(t, 3, now)
	pkt := flowPacket(t, 1, 1)
	flows := flowhash.New(7).NewTable()
	if n := testing.AllocsPerRun(1000, func() { s.pick(pkt, flows, now) }); n != 0 {
		t.Errorf("pick: %.1f allocations, want 0", n)
	}
}

// TestPickTiers: gateways that are up come first, then any with a
// session, then any at all; within a tier the flow's rank decides.
func TestPickTiers(t *testing.T) {
	now := time.Now()
	s := pickSite(t, 3, now)
	pkt := flowPacket(t, 5, 1)
	flows := flowhash.New(7).NewTable()
	first := s.pick(pkt, flows, now)
	first.live.state.Store(uint32(LiveDown))
	second := s.pick(pkt, flows, now)
	if second == first {
		t.Fatal("a down gateway still carries the flow while others are up")
	}
	for _, p := range s.gateways {
		p.live.state.Store(uint32(LiveDown))
	}
	if got := s.pick(pkt, flows, now); got != first {
		t.Errorf("all down: flow on %s, want its first-ranked %s", got.name, first.name)
	}
	first.current.Store(nil)
	if got := s.pick(pkt, flows, now); got == first {
		t.Error("all down: a gateway without a session won over ones with one")
	}
	for _, p := range s.gateways {
		p.current.Store(nil)
	}
	if got := s.pick(pkt, flows, now); got != first {
		t.Errorf("no sessions: flow on %s, want its first-ranked %s", got.name, first.name)
	}
}

// TestReloadGatewaysKeepsOtherFlows: a reload that removes one of site B's
// gateways moves only that gateway's flows, keeps the session with the
// other, and a reload that adds it back returns them.
func TestReloadGatewaysKeepsOtherFlows(t *testing.T) {
	clock := newFakeClock()
	a, b1, b2, cfg := newMultiGateway(t, clock)
	waitUp(t, clock, a)
	send := func(seq int) map[int]map[string]int { return sendFlows(t, a, b1, b2, 32, seq) }
	before := send(0)
	// Both ends may have initiated at the start (crossed sessions); let
	// those handshakes finish before taking the count the reloads must
	// not change.
	hs := settledHandshakes(t, clock, a, "gw-b1")
	without := cfg("site-a")
	without.Sites[1].Gateways = without.Sites[1].Gateways[:1]
	if err := a.r.SetConfig(without); err != nil {
		t.Fatal(err)
	}
	for f, gws := range send(1) {
		if gws["b1"] == 0 {
			t.Errorf("flow %d not on gw-b1 after gw-b2 was removed: %v", f, gws)
		}
	}
	if err := a.r.SetConfig(cfg("site-a")); err != nil {
		t.Fatal(err)
	}
	waitUp(t, clock, a)
	waitFor(t, "a session with gw-b2", func() bool {
		clock.Advance(ProbeTick)
		return !peerStats(a, "gw-b2").SessionCreated.IsZero()
	})
	for f, gws := range send(2) {
		if (gws["b1"] > 0) != (before[f]["b1"] > 0) {
			t.Errorf("flow %d: %v before the reloads, %v after", f, before[f], gws)
		}
	}
	if after := peerStats(a, "gw-b1"); after.HandshakesCompleted+after.HandshakesAnswered != hs.HandshakesCompleted+hs.HandshakesAnswered {
		t.Errorf("the reloads renegotiated gw-b1's session: %+v -> %+v", hs, after)
	}
}

// settledHandshakes returns the handshake counts of g's peer name once
// they have stayed the same over 10 probe ticks.
func settledHandshakes(t *testing.T, clock *fakeClock, g *gateway, name string) PeerStats {
	t.Helper()
	count := func(s PeerStats) uint64 { return s.HandshakesInitiated + s.HandshakesAnswered + s.HandshakesCompleted }
	s := peerStats(g, name)
	for same, i := 0, 0; same < 10; i++ {
		if i == 500 {
			t.Fatalf("handshakes with %s still changing: %+v", name, s)
		}
		clock.Advance(ProbeTick)
		time.Sleep(5 * time.Millisecond)
		next := peerStats(g, name)
		if same++; count(next) != count(s) {
			same = 0
		}
		s = next
	}
	return s
}

func BenchmarkPick(b *testing.B) {
	now := time.Now()
	for _, n := range []int{1, 2, 3, 8} {
		b.Run(fmt.Sprint(n, "gateways"), func(b *testing.B) {
			s := pickSite(b, n, now)
			pkt := flowPacketB(b, 5)
			flows := flowhash.New(7).NewTable()
			b.ReportAllocs()
			for b.Loop() {
				s.pick(pkt, flows, now)
			}
		})
	}
}

// TestProbePathAllocs: answering a probe (open, seal the reply, send it
// with the batch) and sending a round of probes allocate nothing.
func TestProbePathAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	pa := h.a.state.Load().order[0]
	kp := pa.current.Load()
	out := h.b.newOutsideBatch()
	buf := probeScratch()
	replies := h.bindB.sent
	answer := func() {
		msg, err := sealControl(kp, buf, control{typ: probeRequest, echo: 42, size: probeLen})
		if err != nil {
			t.Fatal(err)
		}
		out.sizes[0] = copy(out.bufs[0], msg)
		out.eps[0] = h.bindA.local
		h.b.receiveBatch(out, 1, h.now)
	}
	if n := testing.AllocsPerRun(500, answer); n != 0 {
		t.Errorf("probe answer: %.1f allocations, want 0", n)
	}
	if h.bindB.sent == replies {
		t.Fatal("no probe reply was sent")
	}
	st := h.a.state.Load()
	pa.live.acked.Store(1) // proved long ago: due for a probe
	round := func() {
		pa.live.lastProbe.Store(0)
		h.a.probe.run(st, h.now.Add(time.Minute))
	}
	round() // the first round sizes the batch
	probes := h.bindA.sent
	if n := testing.AllocsPerRun(500, round); n != 0 {
		t.Errorf("probe round: %.1f allocations, want 0", n)
	}
	if h.bindA.sent-probes < 500 {
		t.Errorf("%d probes sent in 500 rounds", h.bindA.sent-probes)
	}
}

func peerStats(g *gateway, name string) PeerStats {
	for _, p := range g.r.Peers() {
		if p.Name == name {
			return p
		}
	}
	return PeerStats{}
}

// TestIdleToActive: a gateway probed at the idle pace, heard from nearly
// ProbeMisses full intervals ago, is not marked down when traffic to it
// starts; a fast probe is sent at once and answered.
func TestIdleToActive(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, clock)
	waitUp(t, clock, a)
	waitUp(t, clock, b)
	for range int(ActiveWindow/ProbeTick) + int(IdleProbeFactor*DefaultProbeInterval/ProbeTick) {
		clock.Advance(ProbeTick)
		// Idle probes are answered meanwhile, and an answer later
		// than probeTimeout (a few ticks) is refused.
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond)
	probes := a.r.Peers()[0].Live.ProbesSent
	a.tun.Inject(udpPacket(t, podA, podB, []byte("wake up")))
	b.expectPacket(t)
	for range 2 * ProbeMisses * int(DefaultProbeInterval/ProbeTick) {
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
		if st := a.r.Peers()[0].Live; st.State != LiveUp {
			t.Fatalf("B went %s when traffic started: %+v", st.State, st)
		}
	}
	if got := a.r.Peers()[0].Live.ProbesSent - probes; got < 2 {
		t.Errorf("%d probes after traffic started, want the fast pace", got)
	}
}
