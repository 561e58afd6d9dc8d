package router

import (
	"bytes"
	"context"
	"crypto/rand"
	"log/slog"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// fakeClock is a Clock the test moves by hand. Ticks are delivered only
// when the test calls Advance, to every router using the clock.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	ticks []fakeTicker
}

type fakeTicker struct {
	c    chan time.Time
	done chan struct{} // closed when the ticker's owner stops it
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_800_000_000, 0)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Ticker(time.Duration) (<-chan time.Time, func()) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := fakeTicker{c: make(chan time.Time), done: make(chan struct{})}
	c.ticks = append(c.ticks, t)
	var once sync.Once
	return t.c, func() { once.Do(func() { close(t.done) }) }
}

// Advance moves time forward by d and delivers one tick to each handshake
// loop, waiting until each has taken it.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	now := c.now
	ticks := append([]fakeTicker(nil), c.ticks...)
	c.mu.Unlock()
	for _, t := range ticks {
		select {
		case t.c <- now:
		case <-t.done: // that router has stopped
		}
	}
}

// gateway is one router under test with its devices.
type gateway struct {
	r     *Router
	tun   *tun.Channel
	bind  udp.Bind
	id    *bhcrypto.Identity
	clock Clock
	// dev, if set, is the router's TUN instead of tun (a wrapper of it).
	dev tun.Device
	// filter, if set before start, is the router's KernelFilter; a
	// *recordingFilter also gets the router, to check ordering.
	filter KernelFilter
	// opts, if set before start, changes the router's Options.
	opts func(*Options)
	done chan error
	stop context.CancelFunc
}

func newIdentity(t testing.TB, cipher bhcrypto.CipherKind) *bhcrypto.Identity {
	t.Helper()
	k, err := bhcrypto.GeneratePrivateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return bhcrypto.NewIdentity(k, cipher, bhcrypto.Prologue("test"))
}

// Address plan of the in-memory pair, the same as the lab's.
var (
	siteAPrefixes = []netip.Prefix{
		netip.MustParsePrefix("10.224.0.0/16"), netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56"),
	}
	siteBPrefixes = []netip.Prefix{
		netip.MustParsePrefix("192.168.50.0/24"), netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("fd00:245::/56"),
	}
	podA  = netip.MustParseAddr("10.244.1.10")
	podB  = netip.MustParseAddr("10.245.1.10")
	podA6 = netip.MustParseAddr("fd00:244:0:1::10")
	podB6 = netip.MustParseAddr("fd00:245:0:1::10")
)

func twoSiteConfig(local string, keyA, keyB bhcrypto.PublicKey, epA, epB netip.AddrPort) *Config {
	return &Config{LocalSite: local, Sites: []SiteConfig{
		{Name: "site-a", Prefixes: siteAPrefixes, Gateways: []PeerConfig{{Name: "gw-a1", PublicKey: keyA, Endpoint: epA}}},
		{Name: "site-b", Prefixes: siteBPrefixes, Gateways: []PeerConfig{{Name: "gw-b1", PublicKey: keyB, Endpoint: epB}}},
	}}
}

// listenLoopback opens a UDP socket on a free loopback port.
func listenLoopback(t *testing.T) *udp.LinuxBind {
	t.Helper()
	bind, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return bind
}

// newGateways makes one gateway per TUN name, each with a fresh identity,
// a channel TUN and its own loopback socket; none is started. clock may
// be nil.
func newGateways(t *testing.T, cipher bhcrypto.CipherKind, clock Clock, names ...string) []*gateway {
	t.Helper()
	gws := make([]*gateway, len(names))
	for i, name := range names {
		gws[i] = &gateway{id: newIdentity(t, cipher), tun: tun.NewChannel(name, 1420), clock: clock, bind: listenLoopback(t)}
	}
	return gws
}

// leaderFirst swaps the identities of a and b, if needed, so that a has
// the lower public key: the end that goes first in the proactive
// handshake's tie-break (handshaker.leads).
func leaderFirst(a, b *gateway) {
	if bytes.Compare(a.id.Public[:], b.id.Public[:]) > 0 {
		a.id, b.id = b.id, a.id
	}
}

// waitSession waits until a holds a session with key, at most
// RekeyTimeout after start (a proactive handshake that waited for the
// peer's retransmission would take that long), and returns how long it
// took; why names what a timeout would mean.
func waitSession(t *testing.T, a *gateway, key bhcrypto.PublicKey, start time.Time, why string) time.Duration {
	t.Helper()
	for {
		if _, _, ok := a.r.CurrentSession(key); ok {
			return time.Since(start)
		}
		if time.Since(start) >= RekeyTimeout {
			t.Fatalf("no session %v after B started: %s", time.Since(start), why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// newLoopbackPair starts two routers on channel TUNs and real loopback UDP
// sockets, configured as site-a and site-b. clock may be nil.
func newLoopbackPair(t *testing.T, cipher bhcrypto.CipherKind, clock Clock) (a, b *gateway) {
	t.Helper()
	gws := newGateways(t, cipher, clock, "bh-a", "bh-b")
	a, b = gws[0], gws[1]
	cfgA := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	a.start(t, cfgA)
	b.start(t, cfgB)
	return a, b
}

func (g *gateway) start(t *testing.T, cfg *Config) {
	t.Helper()
	var dev tun.Device = g.tun
	if g.dev != nil {
		dev = g.dev
	}
	o := Options{TUN: dev, Bind: g.bind, Identity: g.id, Clock: g.clock, Logger: testLogger(t), Filter: g.filter}
	if g.opts != nil {
		g.opts(&o)
	}
	r, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	if rf, ok := g.filter.(*recordingFilter); ok {
		rf.mu.Lock()
		rf.r = r
		rf.mu.Unlock()
	}
	if err := r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	g.r = r
	ctx, cancel := context.WithCancel(context.Background())
	g.stop = cancel
	g.done = make(chan error, 1)
	go func() { g.done <- r.Run(ctx) }()
	t.Cleanup(func() { g.close(t) })
}

func (g *gateway) close(t *testing.T) {
	if g.stop == nil {
		return
	}
	g.stop()
	g.stop = nil
	select {
	case err := <-g.done:
		if err != nil {
			t.Errorf("router Run: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Errorf("router did not stop")
	}
}

// expectPacket waits for a packet on g's TUN and returns it.
func (g *gateway) expectPacket(t *testing.T) []byte {
	t.Helper()
	select {
	case p := <-g.tun.Outbound():
		return p
	case <-time.After(5 * time.Second):
		t.Fatalf("no packet arrived on %s", g.tun.Name())
		return nil
	}
}

// expectNoPacket checks nothing arrives on g's TUN for a moment.
func (g *gateway) expectNoPacket(t *testing.T) {
	t.Helper()
	select {
	case p := <-g.tun.Outbound():
		t.Fatalf("unexpected packet on %s: % x", g.tun.Name(), p)
	case <-time.After(200 * time.Millisecond):
	}
}

// waitDrop waits until the drop counter reaches want.
func waitDrop(t *testing.T, r *Router, dir Direction, reason Reason, want uint64) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for r.drops.Get(dir, reason) < want {
		if time.Now().After(deadline) {
			t.Fatalf("%s/%s drops = %d, want %d", dir, reason, r.drops.Get(dir, reason), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// udpPacket builds an IP/UDP packet with gopacket.
func udpPacket(t testing.TB, src, dst netip.Addr, payload []byte) []byte {
	t.Helper()
	u := &layers.UDP{SrcPort: 40000, DstPort: 7000}
	var ip gopacket.NetworkLayer
	var ipl gopacket.SerializableLayer
	if src.Is4() {
		l := &layers.IPv4{Version: 4, TTL: 64, Protocol: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice(), Flags: layers.IPv4DontFragment}
		ip, ipl = l, l
	} else {
		l := &layers.IPv6{Version: 6, HopLimit: 64, NextHeader: layers.IPProtocolUDP, SrcIP: src.AsSlice(), DstIP: dst.AsSlice()}
		ip, ipl = l, l
	}
	if err := u.SetNetworkLayerForChecksum(ip); err != nil {
		t.Fatal(err)
	}
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, ipl, u, gopacket.Payload(payload)); err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// sendRaw sends one datagram to addr from a fresh loopback socket.
func sendRaw(t *testing.T, addr netip.AddrPort, b []byte) {
	t.Helper()
	c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := c.Write(b); err != nil {
		t.Fatal(err)
	}
}

func mustAddr(s string) netip.Addr { return netip.MustParseAddr(s) }

// testLogger sends the router's log to the test log.
func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// Step advances the clock by total in one-second ticks, letting the
// routers exchange packets between ticks as they would in real time.
func (c *fakeClock) Step(total time.Duration) {
	for total > 0 {
		d := min(total, time.Second)
		c.Advance(d)
		total -= d
		time.Sleep(5 * time.Millisecond)
	}
}

// newInsideBatch is one inside read slot with a run of its own, for tests
// that drive route directly instead of through the reader and sealer.
func (r *Router) newInsideBatch() *insideBatch {
	b := r.newInsideSlot(r.flows.NewTable())
	b.run = &sealRun{out: make([][]byte, 0, len(b.bufs)), flows: make([]uint64, 0, len(b.bufs))}
	return b
}

// routeBatch routes and seals the n packets in b and sends them, as
// sealQueued does for one read.
func (r *Router) routeBatch(b *insideBatch, n int, now time.Time) {
	b.run.now = r.mono.ns(now)
	r.route(b, n, now)
	r.flushInside(b.run)
}
