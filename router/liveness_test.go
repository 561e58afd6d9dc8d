package router

import (
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
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
	gws := newGateways(t, bhcrypto.AESGCM, clock, "bh-a", "bh-b1", "bh-b2")
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

// TestCannotDeliverMovesFlows: B1 answers probes but reports that its LAN
// side is broken (SetCanDeliver(false)): A takes it down within a probe
// interval or two of traffic and moves its flows to B2; when B1 can
// deliver again, it comes back.
func TestCannotDeliverMovesFlows(t *testing.T) {
	clock := newFakeClock()
	_, a, b1, b2 := newFilteredGateways(t, clock)
	sendFlows(t, a, b1, b2, 16, 0)
	b1.r.SetCanDeliver(false)
	var downAfter time.Duration
	for elapsed := time.Duration(0); elapsed < 5*time.Second; elapsed += ProbeTick {
		if peerStats(a, "gw-b1").Live.State == LiveDown {
			downAfter = elapsed
			break
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
	}
	st := peerStats(a, "gw-b1").Live
	if st.State != LiveDown || st.Reason != DownCannotDeliver || !st.CannotDeliver {
		t.Fatalf("gw-b1 at A after it lost its LAN side: %+v", st)
	}
	if limit := 2*DefaultProbeInterval + ProbeTick; downAfter > limit {
		t.Errorf("gw-b1 down %s after it lost its LAN side, want within %s", downAfter, limit)
	}
	t.Logf("cannot deliver: down after %s (fake clock)", downAfter)
	for _, m := range []struct {
		g      *gateway
		series string
	}{
		{a, `bridgehead_peer_cannot_deliver{gateway="gw-b1",site="site-b"} 1`},
		{a, `bridgehead_peer_down_reason{gateway="gw-b1",reason="cannot_deliver",site="site-b"} 1`},
		{a, `bridgehead_peer_down_reason{gateway="gw-b2",reason="cannot_deliver",site="site-b"} 0`},
		{b1, "bridgehead_can_deliver 0"},
		{b2, "bridgehead_can_deliver 1"},
	} {
		if got := scrape(t, m.g.r); !strings.Contains(got, m.series+"\n") {
			t.Errorf("metrics of %s lack %s", m.g.tun.Name(), m.series)
		}
	}
	for f, gws := range sendFlows(t, a, b1, b2, 16, 1) {
		if gws["b1"] > 0 {
			t.Errorf("flow %d still sent to gw-b1", f)
		}
	}
	b1.r.SetCanDeliver(true)
	waitUp(t, clock, a)
}

// TestParseControl: the control message format, and compatibility with
// gateways that predate flags (zero byte 1) and with later ones (unknown
// flags, reserved bytes and padding ignored).
func TestParseControl(t *testing.T) {
	msg := func(b ...byte) []byte { m := make([]byte, probeLen); copy(m, b); return m }
	tests := []struct {
		name string
		in   []byte
		want control
		ok   bool
	}{
		{"old request", msg(probeRequest, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 42), control{typ: probeRequest, echo: 42, size: probeLen}, true},
		{"reply cannot deliver", msg(probeReply, flagCannotDeliver), control{typ: probeReply, flags: flagCannotDeliver, size: probeLen}, true},
		{"reply reads lane bytes", msg(probeReply, flagLanes), control{typ: probeReply, flags: flagLanes, size: probeLen}, true},
		{"reply has an express lane", msg(probeReply, flagLanes|flagExpress), control{typ: probeReply, flags: flagLanes | flagExpress, size: probeLen}, true},
		{"reply draining", msg(probeReply, flagDraining|flagLanes), control{typ: probeReply, flags: flagDraining | flagLanes, size: probeLen}, true},
		{"unknown flags and reserved bytes ignored", msg(probeReply, 0xf0, 9, 9), control{typ: probeReply, size: probeLen}, true},
		{"padded MTU probe", append(msg(probeRequest), make([]byte, 1400)...), control{typ: probeRequest, size: probeLen + 1400}, true},
		{"short", msg(probeRequest)[:probeLen-1], control{}, false},
		{"unknown type", msg(0x1f), control{}, false},
		{"empty", nil, control{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseControl(tt.in)
			if ok != tt.ok || (ok && got != tt.want) {
				t.Errorf("parseControl = %+v, %v; want %+v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

// FuzzParseControl: parseControl never panics, accepts exactly the known
// types at probeLen or more, and what it accepts survives a seal/open
// round trip unchanged.
func FuzzParseControl(f *testing.F) {
	f.Add([]byte{probeRequest, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{probeReply, 1, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0})
	f.Add([]byte{0x12})
	f.Fuzz(func(t *testing.T, b []byte) {
		c, ok := parseControl(b)
		if !ok {
			return
		}
		if len(b) < probeLen || (b[0] != probeRequest && b[0] != probeReply) || c.flags&^knownFlags != 0 || c.size != len(b) {
			t.Fatalf("accepted %x as %+v", b, c)
		}
		// Rebuilt, it parses to the same message.
		buf := make([]byte, c.size)
		buf[0], buf[1] = c.typ, c.flags
		for i := range 8 {
			buf[8+i] = byte(c.echo >> (56 - 8*i))
		}
		if c2, ok := parseControl(buf); !ok || c2 != c {
			t.Fatalf("rebuilt %+v parses as %+v, %v", c, c2, ok)
		}
	})
}

// scrape is r's metrics in the text format.
func scrape(t *testing.T, r *Router) string {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(NewCollector(r))
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(&b, mf); err != nil {
			t.Fatal(err)
		}
	}
	return b.String()
}

// TestMTUBlackHole: datagrams from A to B1 larger than 1200 bytes are
// dropped, small ones pass. B1 stays up, but A finds it MTU-degraded,
// reports the path MTU (within a padding step below the limit), and
// moves every flow to B2. When the path heals, B1 is whole again.
func TestMTUBlackHole(t *testing.T) {
	clock := newFakeClock()
	fa, a, b1, b2 := newFilteredGateways(t, clock)
	sendFlows(t, a, b1, b2, 16, 0)
	toB1 := b1.bind.LocalAddr()
	const limit = 1200 // outer UDP payload bytes that pass
	fa.setDrop(func(msg []byte, ep netip.AddrPort) bool { return ep == toB1 && len(msg) > limit })
	deadline := MTUProbeInterval + 20*time.Second
	for elapsed := time.Duration(0); elapsed < deadline; elapsed += ProbeTick {
		st := peerStats(a, "gw-b1").Live
		if st.State != LiveUp {
			t.Fatalf("gw-b1 went %s: small probes pass, it must stay up: %+v", st.State, st)
		}
		if st.MTUDegraded && st.PathMTU != 0 && st.PathMTU < 1420 {
			break
		}
		if elapsed%time.Second == 0 {
			sendFlows(t, a, b1, b2, 16, 1) // keep A active toward B1 (and B2)
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
	}
	st := peerStats(a, "gw-b1").Live
	// A probe of plaintext size s is a datagram of s+32 bytes.
	if want := limit - 32; !st.MTUDegraded || st.PathMTU > want || st.PathMTU < want-16 {
		t.Fatalf("gw-b1 behind a %d-byte limit: %+v, want MTU-degraded with path MTU in [%d, %d]", limit, st, want-16, want)
	}
	t.Logf("MTU black hole: gw-b1 up, MTU-degraded, path MTU %d", st.PathMTU)
	for _, series := range []string{
		`bridgehead_peer_mtu_degraded{gateway="gw-b1",site="site-b"} 1`,
		`bridgehead_peer_path_mtu_bytes{gateway="gw-b1",site="site-b"} ` + strconv.Itoa(st.PathMTU),
		`bridgehead_peer_mtu_degraded{gateway="gw-b2",site="site-b"} 0`,
		`bridgehead_peer_path_mtu_bytes{gateway="gw-b2",site="site-b"} 1420`,
	} {
		if got := scrape(t, a.r); !strings.Contains(got, series+"\n") {
			t.Errorf("metrics lack %s", series)
		}
	}
	for f, gws := range sendFlows(t, a, b1, b2, 16, 2) {
		if gws["b1"] > 0 {
			t.Errorf("flow %d still sent to MTU-degraded gw-b1", f)
		}
	}
	fa.setDrop(func([]byte, netip.AddrPort) bool { return false })
	for elapsed := time.Duration(0); elapsed < 2*MTUProbeInterval; elapsed += ProbeTick {
		if st := peerStats(a, "gw-b1").Live; !st.MTUDegraded && st.PathMTU == 1420 {
			return
		}
		if elapsed%time.Second == 0 {
			sendFlows(t, a, b1, b2, 4, 3)
		}
		clock.Advance(ProbeTick)
		time.Sleep(time.Millisecond)
	}
	t.Fatalf("gw-b1 after the path healed: %+v", peerStats(a, "gw-b1").Live)
}
