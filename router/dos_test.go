package router

import (
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// loadUp fills a router's handshake queue past the "under load" mark, as
// a flood would.
func loadUp(r *Router) {
	for len(r.hs.queue) < cap(r.hs.queue)/8 {
		m := <-r.hs.free
		m.n = 0
		r.hs.queue <- m
	}
}

// TestCookieUnderLoad: under load, an initiation without a cookie costs
// the responder no Diffie-Hellman: it gets a cookie reply no larger than
// itself. The initiator's retransmission carries mac2 and is answered.
func TestCookieUnderLoad(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.b.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	h.a.hs.initiate(peerB, h.now, false)
	init1 := append([]byte(nil), h.bindA.last[:h.bindA.n]...)

	loadUp(h.b)
	dh := h.b.Handshakes().DH
	h.b.hs.handle(init1, h.bindA.local, h.now, scratch)
	if got := h.b.Handshakes(); got.DH != dh || got.CookieReplies != 1 {
		t.Fatalf("under load without cookie: DH %d -> %d, cookie replies %d; want no DH and one reply", dh, got.DH, got.CookieReplies)
	}
	reply := append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	if reply[0] != bhcrypto.MsgCookieReply || len(reply) > len(init1) {
		t.Fatalf("reply type %d, %d bytes for a %d-byte initiation", reply[0], len(reply), len(init1))
	}
	if h.b.drops.Get(Outside, ReasonCookieRequired) != 1 {
		t.Fatal("cookie_required not counted")
	}

	h.a.hs.handleCookieReply(reply)
	if h.a.drops.Get(Outside, ReasonBadCookie) != 0 {
		t.Fatal("A refused the cookie")
	}
	h.a.hs.initiate(peerB, h.now, true)
	init2 := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	answered := h.b.Handshakes().Answered
	h.b.hs.handle(init2, h.bindA.local, h.now, scratch)
	if got := h.b.Handshakes(); got.DH != dh+1 || got.Answered != answered+1 {
		t.Fatalf("initiation with a valid cookie not answered: %+v", got)
	}
	// The same cookie from another address is no good.
	h.a.hs.initiate(peerB, h.now, true)
	init3 := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	h.b.hs.handle(init3, netip.MustParseAddrPort("192.0.2.99:51820"), h.now, scratch)
	if got := h.b.Handshakes(); got.DH != dh+1 || got.CookieReplies != 2 {
		t.Fatalf("cookie accepted from another address: %+v", got)
	}
}

// TestHandshakeRateLimitUnderLoad: under load, one source with valid
// cookies that is not a configured peer endpoint is held to the token
// bucket's burst.
func TestHandshakeRateLimitUnderLoad(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.b.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	from := netip.MustParseAddrPort("198.51.100.7:40000")
	cookiedInitiation(t, h, from, h.now)
	for range 3 * HandshakeBurst {
		h.a.hs.initiate(peerB, h.now, true)
		h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), from, h.now, scratch)
	}
	if got := h.b.drops.Get(Outside, ReasonRateLimited); got != 2*HandshakeBurst {
		t.Fatalf("rate_limited drops %d, want %d (burst %d of %d)", got, 2*HandshakeBurst, HandshakeBurst, 3*HandshakeBurst)
	}
}

// TestTruncatedAndUnsolicitedHandshakes: a truncated initiation is
// dropped by size, and a following valid one still completes; a response
// nobody asked for is dropped as unknown_index.
func TestTruncatedAndUnsolicitedHandshakes(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	now := a.r.clock.Now()
	_, init, err := a.id.CreateInitiation(b.id.Public, 42, now)
	if err != nil {
		t.Fatal(err)
	}
	sendRaw(t, b.bind.LocalAddr(), init[:100])
	waitDrop(t, b.r, Outside, ReasonBadSize, 1)
	// The real gateway A now handshakes normally.
	a.tun.Inject(udpPacket(t, podA, podB, []byte("after truncation")))
	b.expectPacket(t)

	// A response to an initiation A never sent.
	ri, err := b.id.ConsumeInitiation(init)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := b.id.CreateResponse(ri, 77, now)
	if err != nil {
		t.Fatal(err)
	}
	sendRaw(t, a.bind.LocalAddr(), resp)
	waitDrop(t, a.r, Outside, ReasonUnknownIndex, 1)
}

// TestReloadPeerChanges: a changed endpoint moves only that peer and keeps
// its session; a changed key replaces the peer and forgets its sessions.
func TestReloadPeerChanges(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	old := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	kp := old.current.Load()
	moved := netip.MustParseAddrPort("192.0.2.77:51820")
	cfg := twoSiteConfig("site-a", h.a.keys.Load().Current.Public, h.b.keys.Load().Current.Public, h.bindA.local, moved)
	if err := h.a.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	p := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	if p != old || p.current.Load() != kp || p.Endpoint() != moved {
		t.Fatalf("endpoint change: same peer %v, same session %v, endpoint %s", p == old, p.current.Load() == kp, p.Endpoint())
	}
	// Reapplying the same config changes nothing (idempotent).
	if err := h.a.SetConfig(cfg); err != nil || h.a.state.Load().peers[h.b.keys.Load().Current.Public] != old {
		t.Fatal("reapplying the same config replaced the peer")
	}
	newKey := newIdentity(t, bhcrypto.AESGCM).Public
	if err := h.a.SetConfig(twoSiteConfig("site-a", h.a.keys.Load().Current.Public, newKey, h.bindA.local, moved)); err != nil {
		t.Fatal(err)
	}
	if _, ok := h.a.index.lookup(kp.LocalIndex); ok {
		t.Fatal("the session of a peer whose key changed still matches incoming packets")
	}
	if p := h.a.state.Load().peers[newKey]; p == nil || p == old || p.current.Load() != nil {
		t.Fatal("key change did not create a fresh peer")
	}
	// A bad config is refused whole and the running one stays.
	before := h.a.state.Load()
	bad := twoSiteConfig("site-a", h.a.keys.Load().Current.Public, newKey, h.bindA.local, moved)
	bad.Sites[1].Prefixes = append(bad.Sites[1].Prefixes, bad.Sites[0].Prefixes[0])
	if err := h.a.SetConfig(bad); err == nil || h.a.state.Load() != before {
		t.Fatalf("overlapping config accepted (err %v) or state replaced", err)
	}
}

// TestSetConfigAllOrNothing: a config refused for a problem found late in
// its list (a key used twice, a missing local site) leaves the running
// peers' endpoint and keepalive as they were, not only the state pointer.
func TestSetConfigAllOrNothing(t *testing.T) {
	for _, tc := range []struct {
		name  string
		spoil func(c *Config, dup bhcrypto.PublicKey)
	}{
		{"key used twice", func(c *Config, dup bhcrypto.PublicKey) {
			c.Sites = append(c.Sites, SiteConfig{Name: "site-c", Prefixes: []netip.Prefix{netip.MustParsePrefix("10.99.0.0/16")},
				Gateways: []PeerConfig{{Name: "gw-c1", PublicKey: dup, Endpoint: netip.MustParseAddrPort("192.0.2.99:51820")}}})
		}},
		{"no local site", func(c *Config, _ bhcrypto.PublicKey) {
			c.LocalSite = "site-z"
			c.Sites = c.Sites[1:] // site-a, holding our own key, would fail first
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHotPair(t, bhcrypto.AESGCM)
			p := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
			before := h.a.state.Load()
			ep, ka := p.Endpoint(), p.Stats().Keepalive
			bad := twoSiteConfig("site-a", h.a.keys.Load().Current.Public, h.b.keys.Load().Current.Public, h.bindA.local, netip.MustParseAddrPort("192.0.2.77:51820"))
			bad.Sites[1].Gateways[0].Keepalive = 25 * time.Second
			tc.spoil(bad, h.b.keys.Load().Current.Public)
			if err := h.a.SetConfig(bad); err == nil {
				t.Fatal("bad config accepted")
			}
			if h.a.state.Load() != before {
				t.Fatal("state replaced")
			}
			if p.Endpoint() != ep || p.Stats().Keepalive != ka {
				t.Fatalf("refused config changed the running peer: endpoint %s (was %s), keepalive %s (was %s)",
					p.Endpoint(), ep, p.Stats().Keepalive, ka)
			}
			if *p.configEndpoint.Load() != ep {
				t.Fatalf("refused config changed the configured endpoint to %s", *p.configEndpoint.Load())
			}
		})
	}
}

// cookiedInitiation has A get a cookie from B (under load) and returns
// A's next initiation, which carries mac2 for from.
func cookiedInitiation(t *testing.T, h *hotPair, from netip.AddrPort, now time.Time) []byte {
	t.Helper()
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	h.a.hs.initiate(peerB, now, true)
	loadUp(h.b)
	replies := h.b.Handshakes().CookieReplies
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), from, now, make([]byte, h.b.set.bufSize))
	if h.b.Handshakes().CookieReplies != replies+1 {
		t.Fatal("no cookie reply under load")
	}
	h.a.hs.handleCookieReply(append([]byte(nil), h.bindB.last[:h.bindB.n]...))
	h.a.hs.initiate(peerB, now, true)
	return append([]byte(nil), h.bindA.last[:h.bindA.n]...)
}

// fillLimiter fills r's handshake limiter table with distinct sources.
func fillLimiter(r *Router) {
	for i := range 1 << 16 {
		r.hs.gate.limiter.Allow(netip.AddrFrom4([4]byte{100, 64 + byte(i>>16), byte(i >> 8), byte(i)}))
	}
}

// TestConfiguredPeerUnderLoadFullLimiter: with the limiter's table full of
// other sources and the configured peer's own bucket empty, the peer's
// handshake (with a valid cookie) still completes under load; a source
// that is not a configured endpoint gets into the full table too.
func TestConfiguredPeerUnderLoadFullLimiter(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	fillLimiter(h.b)
	for range HandshakeBurst + 1 { // the peer's own bucket empty, if it has one
		h.b.hs.gate.limiter.Take(h.bindA.local.Addr())
	}
	answered := h.b.Handshakes().Answered
	init := cookiedInitiation(t, h, h.bindA.local, h.now)
	h.b.hs.handle(init, h.bindA.local, h.now, make([]byte, h.b.set.bufSize))
	if got := h.b.Handshakes().Answered; got != answered+1 {
		t.Fatalf("configured peer refused under load: answered %d -> %d, drops %+v", answered, got, h.b.drops.snapshot())
	}
	// A source that is no configured endpoint (the peer roamed) is
	// rate limited, but not locked out by a table full of others.
	roamed := netip.MustParseAddrPort("198.51.100.7:40000")
	now := h.now.Add(time.Second)
	init = cookiedInitiation(t, h, roamed, now)
	h.b.hs.handle(init, roamed, now, make([]byte, h.b.set.bufSize))
	if got := h.b.Handshakes().Answered; got != answered+2 {
		t.Fatalf("new source refused by a full limiter table: drops %+v", h.b.drops.snapshot())
	}
}

// TestUnderLoadHoldover: cookies stay required for UnderLoadHoldover after
// the handshake queue drains, then not.
func TestUnderLoadHoldover(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.b.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	loadUp(h.b)
	h.a.hs.initiate(peerB, h.now, false)
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, h.now, scratch)
	for len(h.b.hs.queue) > 0 { // the flood ends
		h.b.hs.free <- <-h.b.hs.queue
	}
	replies := h.b.Handshakes().CookieReplies
	at := h.now.Add(UnderLoadHoldover - time.Millisecond)
	h.a.hs.initiate(peerB, at, true)
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, at, scratch)
	if got := h.b.Handshakes().CookieReplies; got != replies+1 {
		t.Fatalf("no cookie required %s after the load ended", UnderLoadHoldover-time.Millisecond)
	}
	answered := h.b.Handshakes().Answered
	at = h.now.Add(UnderLoadHoldover + time.Millisecond)
	h.a.hs.initiate(peerB, at, true)
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, at, scratch)
	if got := h.b.Handshakes().Answered; got != answered+1 {
		t.Fatalf("initiation not answered after the hold-over: drops %+v", h.b.drops.snapshot())
	}
}

// TestInitiationInterval: a peer's initiations closer than
// InitiationInterval are dropped as a flood, even with fresh timestamps.
func TestInitiationInterval(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.b.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	send := func(at time.Time) {
		h.a.hs.initiate(peerB, at, true)
		h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, at, scratch)
	}
	answered := h.b.Handshakes().Answered
	send(h.now)
	send(h.now.Add(InitiationInterval / 2))
	if got := h.b.Handshakes().Answered; got != answered+1 || h.b.drops.Get(Outside, ReasonRateLimited) != 1 {
		t.Fatalf("answered %d of 2 initiations %s apart (rate_limited %d), want 1", got-answered, InitiationInterval/2, h.b.drops.Get(Outside, ReasonRateLimited))
	}
	send(h.now.Add(InitiationInterval + time.Millisecond))
	if got := h.b.Handshakes().Answered; got != answered+2 {
		t.Fatal("initiation after the interval not answered")
	}
}

// TestLimiterCleanupEverySecond: idle sources leave the handshake
// limiter's table within a second or two, so a table filled by a flood
// empties quickly.
func TestLimiterCleanupEverySecond(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	clock := h.b.clock.(*fakeClock)
	h.b.hs.timers(clock.Now())
	fillLimiter(h.b)
	for range 2 {
		clock.Advance(time.Second)
		h.b.hs.timers(clock.Now())
	}
	if n := h.b.hs.gate.limiter.Len(); n != 0 {
		t.Fatalf("%d idle sources still tracked 2 s later", n)
	}
}

// TestResponseToPendingUnderLoad: under load, a response to an
// initiation of ours that is still pending needs a cookie like any
// handshake message (as in WireGuard: its index is no secret from whoever
// relayed or watched the initiation): without mac2 it gets a cookie reply
// and costs no DH; the responder answers our next attempt with mac2, and
// that completes under load. One for an index we never used is dropped
// before any DH, and a replay of the completed one costs nothing either.
func TestResponseToPendingUnderLoad(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.a.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	h.a.hs.initiate(peerB, h.now, false)
	init1 := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	h.b.hs.handle(init1, h.bindA.local, h.now, make([]byte, h.b.set.bufSize))
	resp := append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	if resp[0] != bhcrypto.MsgResponse {
		t.Fatalf("B answered with type %d", resp[0])
	}

	loadUp(h.a)
	completed, replies, dh := h.a.Handshakes().Completed, h.a.Handshakes().CookieReplies, h.a.Handshakes().DH
	h.a.hs.handle(resp, h.bindB.local, h.now, scratch)
	if got := h.a.Handshakes(); got.Completed != completed || got.CookieReplies != replies+1 || got.DH != dh {
		t.Fatalf("response without a cookie under load: %+v (completed before %d)", got, completed)
	}
	// B takes the cookie; A's next attempt gets a response with mac2.
	h.b.hs.handleCookieReply(append([]byte(nil), h.bindA.last[:h.bindA.n]...))
	if n := h.b.drops.Get(Outside, ReasonBadCookie); n != 0 {
		t.Fatal("B refused A's cookie")
	}
	now := h.now.Add(InitiationInterval + time.Millisecond)
	h.a.hs.initiate(peerB, now, true)
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, now, make([]byte, h.b.set.bufSize))
	resp = append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	loadUp(h.a)
	h.a.hs.handle(resp, h.bindB.local, now, scratch)
	if got := h.a.Handshakes(); got.Completed != completed+1 {
		t.Fatalf("response with a cookie under load not completed: %+v, drops %+v", got, h.a.drops.snapshot())
	}
	dh = h.a.Handshakes().DH
	h.a.hs.handle(resp, h.bindB.local, now, scratch) // replay
	forged := append([]byte(nil), resp...)
	forged[8] ^= 0xff // another receiver index
	h.a.hs.handle(forged, h.bindB.local, now, scratch)
	if got := h.a.Handshakes(); got.DH != dh || got.Completed != completed+1 {
		t.Fatalf("a replayed or foreign response cost DH or completed: %+v", got)
	}
}
