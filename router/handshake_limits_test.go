package router

import (
	"testing"

	"golang.org/x/crypto/blake2s"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/transit"
)

// setMAC1 gives msg a valid mac1 for recipient, as anyone who knows its
// public key can.
func setMAC1(t *testing.T, msg []byte, recipient bhcrypto.PublicKey) {
	t.Helper()
	key := blake2s.Sum256(append([]byte("mac1----"), recipient[:]...))
	h, err := blake2s.New128(key[:])
	if err != nil {
		t.Fatal(err)
	}
	h.Write(msg[:len(msg)-32])
	h.Sum(msg[len(msg)-32 : len(msg)-32])
	clear(msg[len(msg)-16:])
}

// TestForgedResponsesBounded: responses that carry our pending index and
// a valid mac1 but do not complete the handshake (anyone who saw the
// initiation, a hub relaying it for one, can make them) cost DH only
// maxResponseFailures times per pending index; the rest are dropped
// unread (response_limited). The retransmission, with a new index, still
// completes with the genuine responder.
func TestForgedResponsesBounded(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	scratch := make([]byte, h.a.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	h.a.hs.initiate(peerB, h.now, false)
	init1 := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	h.b.hs.handle(init1, h.bindA.local, h.now, make([]byte, h.b.set.bufSize))
	resp := append([]byte(nil), h.bindB.last[:h.bindB.n]...)
	forged := append([]byte(nil), resp...)
	forged[12+40] ^= 1 // the empty payload's tag
	setMAC1(t, forged, h.a.keys.Load().Current.Public)
	if !bhcrypto.CheckMAC1(forged, h.a.keys.Load().Current.Public) {
		t.Fatal("forged response has no valid mac1")
	}
	dh := h.a.Handshakes().DH
	const n = 10
	for range n {
		h.a.hs.handle(forged, h.bindB.local, h.now, scratch)
	}
	if got := h.a.Handshakes().DH - dh; got != maxResponseFailures {
		t.Errorf("%d forged responses cost DH %d times, want %d", n, got, maxResponseFailures)
	}
	if got := h.a.drops.Get(Outside, ReasonResponseLimited); got != n-maxResponseFailures {
		t.Errorf("response_limited %d, want %d", got, n-maxResponseFailures)
	}
	if !peerB.handshaking.Load() {
		t.Fatal("forged responses killed the pending initiation")
	}
	// The retransmission starts over with a new index.
	now := h.now.Add(InitiationInterval)
	h.a.hs.initiate(peerB, now, true)
	h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), h.bindA.local, now, make([]byte, h.b.set.bufSize))
	completed := h.a.Handshakes().Completed
	h.a.hs.handle(append([]byte(nil), h.bindB.last[:h.bindB.n]...), h.bindB.local, now, scratch)
	if got := h.a.Handshakes().Completed; got != completed+1 {
		t.Fatalf("the retransmission's genuine response did not complete: drops %+v", h.a.drops.snapshot())
	}
}

// TestStandInRateLimitedUnderLoad: a gateway configured at a stand-in
// (reached through a hub, which names the origin of what it relays) is
// no proven endpoint: under load, handshakes from there are held to the
// per-source rate like any source's, not waved through as a configured
// endpoint's are.
func TestStandInRateLimitedUnderLoad(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	standIn := transit.PseudoEndpoint(3)
	if err := h.b.SetConfig(twoSiteConfig("site-b", h.a.keys.Load().Current.Public, h.b.keys.Load().Current.Public, standIn, h.bindB.local)); err != nil {
		t.Fatal(err)
	}
	if h.b.state.Load().byEndpoint[standIn] == nil {
		t.Fatal("the stand-in is not A's configured endpoint")
	}
	scratch := make([]byte, h.b.set.bufSize)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	cookiedInitiation(t, h, standIn, h.now)
	for range 3 * HandshakeBurst {
		h.a.hs.initiate(peerB, h.now, true)
		h.b.hs.handle(append([]byte(nil), h.bindA.last[:h.bindA.n]...), standIn, h.now, scratch)
	}
	if got := h.b.drops.Get(Outside, ReasonRateLimited); got != 2*HandshakeBurst {
		t.Fatalf("rate_limited drops from a stand-in %d, want %d", got, 2*HandshakeBurst)
	}
}
