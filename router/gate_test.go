package router

import (
	"crypto/rand"
	"log/slog"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestHandshakeGatePart drives handshakeGate alone: the load mark and its
// holdover, mac1 (a bad one goes to the blocker), cookies under load, the
// per-source limit that spares configured peers, and the pace of our own
// attempts.
func TestHandshakeGatePart(t *testing.T) {
	clock := newFakeClock()
	us, them := newIdentity(t, bhcrypto.AESGCM), newIdentity(t, bhcrypto.AESGCM)
	f := newRecordingFilter()
	var state atomic.Pointer[routingState]
	state.Store(&routingState{})
	k := newKernelFilter(f, slog.New(slog.DiscardHandler), &Drops{}, func(uint32) bool { return true })
	var keys atomic.Pointer[bhcrypto.KeyRing]
	keys.Store(bhcrypto.NewKeyRing(us))
	g := newHandshakeGate(&keys, rand.Reader, clock.Now, newSourceBlocker(k, &state, clock.Now, slog.New(slog.DiscardHandler)))

	t.Run("load", func(t *testing.T) {
		t0 := clock.Now()
		for _, tc := range []struct {
			queued int
			at     time.Duration
			want   bool
		}{
			{0, 0, false},
			{31, 0, false},
			{32, 0, true}, // an eighth of 256
			{0, UnderLoadHoldover - time.Millisecond, true},
			{0, UnderLoadHoldover, false},
		} {
			if got := g.underLoad(tc.queued, 256, t0.Add(tc.at)); got != tc.want {
				t.Errorf("%d queued at +%s: under load %v, want %v", tc.queued, tc.at, got, tc.want)
			}
		}
	})

	from := netip.MustParseAddrPort("198.51.100.7:40000")
	initiation := func(jar *bhcrypto.CookieJar) []byte {
		_, msg, err := them.CreateInitiation(us.Public, 7, clock.Now())
		if err != nil {
			t.Fatal(err)
		}
		if jar != nil {
			jar.AddMAC2(msg)
			jar.Sent(msg)
		}
		return msg
	}

	t.Run("mac1", func(t *testing.T) {
		mac1 := g.newMAC1()
		msg := initiation(nil)
		if !g.checkMAC1(mac1, msg, from) {
			t.Fatal("a good mac1 refused")
		}
		msg[len(msg)-17] ^= 1 // the last byte of mac1 (mac2 is the last 16)
		for range BadMACBurst + 1 {
			if g.checkMAC1(mac1, msg, from) {
				t.Fatal("a bad mac1 passed")
			}
		}
		if f.blocked[from.Addr()] != BlockBadMACFor {
			t.Errorf("source of bad mac1s not blocked: %v", f.blocked)
		}
	})

	t.Run("cookies and limit", func(t *testing.T) {
		jar := bhcrypto.NewCookieJar(us.Public, clock.Now)
		reply, drop, ok := g.admit(initiation(jar), from, false)
		if ok || drop != ReasonCookieRequired || reply == nil || reply[0] != bhcrypto.MsgCookieReply {
			t.Fatalf("no cookie: ok %v drop %s reply %v; want a cookie reply", ok, drop, reply != nil)
		}
		if err := jar.ConsumeReply(reply); err != nil {
			t.Fatal(err)
		}
		passed := 0
		for range 3 * HandshakeBurst {
			if _, drop, ok := g.admit(initiation(jar), from, false); ok {
				passed++
			} else if drop != ReasonRateLimited {
				t.Fatalf("with a cookie: dropped as %s", drop)
			}
		}
		if passed != HandshakeBurst {
			t.Errorf("%d of %d passed one source's limit, want the burst %d", passed, 3*HandshakeBurst, HandshakeBurst)
		}
		if _, _, ok := g.admit(initiation(jar), from, true); !ok {
			t.Error("a configured peer endpoint with a cookie was rate limited")
		}
	})

	t.Run("pace", func(t *testing.T) {
		n := 0
		for g.pace() {
			n++
		}
		if n != InitiationBurst {
			t.Errorf("%d attempts at once, want the burst %d", n, InitiationBurst)
		}
		clock.Advance(time.Second / InitiationRate)
		if !g.pace() {
			t.Error("no attempt allowed after a token's time")
		}
	})
}
