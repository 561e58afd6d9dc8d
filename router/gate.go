package router

import (
	"io"
	"net/netip"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/ratelimit"
)

// handshakeGate decides which handshake messages may cost this gateway
// work. Messages without a valid mac1 (keyed by our public key) never
// take a queue slot, and their sources go to the blocker. While the
// handshake queue is an eighth full, or was within UnderLoadHoldover, the
// handshake loop is under load: messages need a valid cookie (mac2), and
// each source other than a configured peer endpoint is held to
// HandshakeRate. Our own new initiations are paced to InitiationRate.
//
// The outside loops call checkMAC1, each with its own checker (newMAC1:
// a MAC1Checker keeps hash state, so one shared between the lanes'
// loops would race); everything else runs in the handshake loop, which
// owns lastLoaded. Cookies and the limiters are safe for concurrent use.
type handshakeGate struct {
	// keys are this gateway's static keys, which mac1 is keyed by:
	// the Router's (keys.go).
	keys     *atomic.Pointer[bhcrypto.KeyRing]
	cookies  *bhcrypto.CookieChecker
	limiter  *ratelimit.Limiter // handshakes per source under load
	initPace *ratelimit.Limiter // our new handshake attempts (one bucket)
	blocker  *sourceBlocker     // sources of bad mac1s

	lastLoaded time.Time // last time the queue was past the load mark
}

func newHandshakeGate(keys *atomic.Pointer[bhcrypto.KeyRing], rand io.Reader, now func() time.Time, blocker *sourceBlocker) *handshakeGate {
	return &handshakeGate{
		keys:     keys,
		cookies:  bhcrypto.NewCookieChecker(keys.Load().Current.Public, rand, now),
		limiter:  ratelimit.New(HandshakeRate, HandshakeBurst, 65536, now),
		initPace: ratelimit.New(InitiationRate, InitiationBurst, 1, now),
		blocker:  blocker,
	}
}

// newMAC1 returns a mac1 checker for one outside loop; it must not be
// shared with another loop.
func (g *handshakeGate) newMAC1() *bhcrypto.MAC1Checker {
	return bhcrypto.NewMAC1Checker(g.keys.Load().Current.Public)
}

// checkMAC1 reports whether msg (an initiation or response of the right
// size) carries a valid mac1, checked with mac1, the calling loop's own
// checker; a source sending bad ones is noted by the blocker. It runs in
// an outside loop and allocates nothing.
func (g *handshakeGate) checkMAC1(mac1 *bhcrypto.MAC1Checker, msg []byte, from netip.AddrPort) bool {
	if mac1.CheckRing(g.keys.Load(), msg) { // either key during a rollover
		return true
	}
	g.blocker.note(from)
	return false
}

// underLoad reports whether the handshake loop is under load at now, with
// queued of capacity messages waiting: the queue is past an eighth full,
// or was within UnderLoadHoldover.
func (g *handshakeGate) underLoad(queued, capacity int, now time.Time) bool {
	if queued >= capacity/8 {
		g.lastLoaded = now
		return true
	}
	return !g.lastLoaded.IsZero() && now.Sub(g.lastLoaded) < UnderLoadHoldover
}

// admit decides, under load, whether msg from `from` may cost
// Diffie-Hellman; known says whether from is a configured peer endpoint
// (never rate limited: the per-peer initiation interval bounds it). When
// it may not, drop is the reason, and reply, when not nil, is a cookie
// reply to send back.
func (g *handshakeGate) admit(msg []byte, from netip.AddrPort, known bool) (reply []byte, drop Reason, ok bool) {
	if !g.cookies.CheckMAC2(msg, from) {
		// The reply is encrypted under the key the sender addressed.
		ring := g.keys.Load()
		to := ring.Current.Public
		if ring.Previous != nil && !bhcrypto.CheckMAC1(msg, to) {
			to = ring.Previous.Public
		}
		if r, err := g.cookies.CreateReplyAs(msg, from, to); err == nil {
			reply = r
		}
		return reply, ReasonCookieRequired, false
	}
	if !known && !g.limiter.Allow(from.Addr()) {
		return nil, ReasonRateLimited, false
	}
	return nil, 0, true
}

// pace reports whether a new handshake attempt of ours may start now.
func (g *handshakeGate) pace() bool { return g.initPace.Allow(netip.IPv4Unspecified()) }

// gc lets idle sources leave the limiters and forgets expired blocks.
// Handshake loop.
func (g *handshakeGate) gc(now time.Time) {
	g.limiter.GC()
	g.blocker.gc(now)
}
