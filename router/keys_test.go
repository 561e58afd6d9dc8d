package router

import (
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// keyStep is the handshake loop of one router driven by hand: initiations
// and responses go through handleInitiation and handleResponse, the
// datagram each one sends is read from the capture bind.
type keyStep struct {
	t       *testing.T
	h       *hotPair
	scratch []byte
}

func newKeyStep(t *testing.T) *keyStep {
	h := newHotPair(t, bhcrypto.AESGCM)
	return &keyStep{t: t, h: h, scratch: make([]byte, h.a.set.bufSize)}
}

// sent returns a copy of the last datagram bind sent.
func sent(b *captureBind) []byte { return append([]byte(nil), b.last[:b.n]...) }

// handshakeAB runs one handshake A → B through both routers at now and
// reports whether A completed it.
func (s *keyStep) handshakeAB(now time.Time) bool {
	h := s.h
	p := h.a.state.Load().order[0]
	completed := h.a.Handshakes().Completed
	h.a.hs.initiate(p, now, true)
	sentB := h.bindB.sent
	h.b.hs.handleInitiation(sent(h.bindA), h.bindA.local, now)
	if h.bindB.sent == sentB {
		return false // B did not answer
	}
	h.a.hs.handleResponse(sent(h.bindB), h.bindB.local, now, s.scratch)
	return h.a.Handshakes().Completed > completed
}

// rotateConfig is site-a's config naming B's new key, with its old one
// accepted until until.
func rotateConfig(h *hotPair, keyA, newB, oldB bhcrypto.PublicKey, until time.Time) *Config {
	c := twoSiteConfig("site-a", keyA, newB, h.bindA.local, h.bindB.local)
	gw := &c.Sites[1].Gateways[0]
	gw.PreviousPublicKey, gw.PreviousUntil = oldB, until
	return c
}

// TestKeyRollover: B rotates its static key. During the overlap it answers
// handshakes made to either key and initiates with the new one only; A,
// whose config names B's new key and its old one until the end of the
// overlap, accepts both from B and keeps B's Peer and sessions. After
// the overlap the old key is refused on both sides.
func TestKeyRollover(t *testing.T) {
	s := newKeyStep(t)
	h := s.h
	now := h.now
	idA := h.a.KeyRing().Current
	oldB := h.b.KeyRing().Current
	newB := newIdentity(t, bhcrypto.AESGCM)
	until := now.Add(time.Hour)

	peerOfB := h.a.state.Load().order[0]
	sessionOfB := peerOfB.current.Load()
	peerOfA := h.b.state.Load().order[0]
	sessionOfA := peerOfA.current.Load()

	// B rotates; A does not know yet: A's handshakes go to the old key
	// and B answers them with it.
	if err := h.b.SetKeyRing(h.b.KeyRing().Rotate(newB, until)); err != nil {
		t.Fatal(err)
	}
	if peerOfA.current.Load() != sessionOfA {
		t.Fatal("the rotation touched B's session")
	}
	now = now.Add(time.Second)
	if !s.handshakeAB(now) {
		t.Fatal("a handshake to B's old key during the overlap failed")
	}
	if got := h.b.hs.count.previousKey.Load(); got != 1 {
		t.Fatalf("B counted %d handshakes to its previous key, want 1", got)
	}

	// B initiates with its new key only.
	h.b.hs.initiate(peerOfA, now, true)
	ri, err := idA.ConsumeInitiation(sent(h.bindB))
	if err != nil {
		t.Fatal(err)
	}
	if ri.PeerStatic != newB.Public {
		t.Fatalf("B initiated with %v, want its new key", ri.PeerStatic)
	}

	// A learns the new key; the old one stays accepted until `until`.
	if err := h.a.SetConfig(rotateConfig(h, idA.Public, newB.Public, oldB.Public, until)); err != nil {
		t.Fatal(err)
	}
	if got := h.a.state.Load().order[0]; got != peerOfB {
		t.Fatal("A made a new Peer for B's rollover: its sessions are gone")
	}
	if peerOfB.PublicKey() != newB.Public || h.a.state.Load().peers[oldB.Public] != peerOfB {
		t.Fatal("A does not find B by both keys")
	}
	if cur := peerOfB.current.Load(); cur == nil {
		t.Fatal("A's session with B was wiped by the rollover")
	} else if cur == sessionOfB {
		// The handshake above replaced it; the rollover must not have
		// dropped that one either.
		t.Fatal("unexpected: no new session from the handshake")
	}
	now = now.Add(time.Second)
	if !s.handshakeAB(now) {
		t.Fatal("a handshake to B's new key failed")
	}

	// An initiation made with B's old key (a B that restarted without
	// its new key file, say) is accepted by A during the overlap...
	initOld := func(at time.Time) []byte {
		_, msg, err := oldB.CreateInitiation(idA.Public, 42, at)
		if err != nil {
			t.Fatal(err)
		}
		return msg
	}
	now = now.Add(time.Second)
	answered := h.a.Handshakes().Answered
	h.a.hs.handleInitiation(initOld(now), h.bindB.local, now)
	if h.a.Handshakes().Answered != answered+1 {
		t.Fatal("A refused B's old key during the overlap")
	}

	// ...and refused after it, by both A (B's old key) and B (its own).
	now = until.Add(time.Second)
	h.a.hs.handleInitiation(initOld(now), h.bindB.local, now)
	if h.a.Handshakes().Answered != answered+1 || h.a.drops.Get(Outside, ReasonKeyExpired) != 1 {
		t.Fatalf("A answered B's old key after the overlap (key_expired drops %d)", h.a.drops.Get(Outside, ReasonKeyExpired))
	}
	_, toOld, err := idA.CreateInitiation(oldB.Public, 43, now)
	if err != nil {
		t.Fatal(err)
	}
	h.b.hs.handleInitiation(toOld, h.bindA.local, now)
	if got := h.b.drops.Get(Outside, ReasonKeyExpired); got != 1 {
		t.Fatalf("B: key_expired drops = %d after a handshake to its retired key, want 1", got)
	}
	h.b.hs.expireKeys(now)
	if h.b.KeyRing().Previous != nil {
		t.Fatal("B kept its previous key after the overlap")
	}
	if !s.handshakeAB(now.Add(time.Second)) {
		t.Fatal("a handshake to B's new key failed after the overlap")
	}
}

// TestKeyChangeWithoutRollover: a new key that does not name the running
// one as its previous (a reimaged gateway) makes a new Peer, so no session
// of the old key carries over.
func TestKeyChangeWithoutRollover(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	old := h.a.state.Load().order[0]
	fresh := newIdentity(t, bhcrypto.AESGCM)
	if err := h.a.SetConfig(twoSiteConfig("site-a", h.a.KeyRing().Current.Public, fresh.Public, h.bindA.local, h.bindB.local)); err != nil {
		t.Fatal(err)
	}
	if p := h.a.state.Load().order[0]; p == old || p.current.Load() != nil || !old.removed.Load() {
		t.Fatal("a reimaged gateway's new key kept the old key's Peer and sessions")
	}
}

// TestPresharedKeys: a pair with preshared keys completes handshakes in
// IKpsk2; during a rotation the initiator's second key completes them
// (counted); a pair whose keys differ fails on the initiator, one side
// without a key is refused by the responder, both counted as
// psk_mismatch.
func TestPresharedKeys(t *testing.T) {
	k1, k2, k3 := testPSK(t), testPSK(t), testPSK(t)
	tests := []struct {
		name           string
		onA, onB       []bhcrypto.PresharedKey
		ok             bool
		secondPSK      uint64
		mismatchA      uint64 // psk_mismatch drops on A (initiator)
		mismatchB      uint64 // on B (responder)
		wantFlagPSKSet bool
	}{
		{"none", nil, nil, true, 0, 0, 0, false},
		{"same key", []bhcrypto.PresharedKey{k1}, []bhcrypto.PresharedKey{k1}, true, 0, 0, 0, true},
		{"rotation, B still on the old key", []bhcrypto.PresharedKey{k2, k1}, []bhcrypto.PresharedKey{k1}, true, 1, 0, 0, true},
		{"rotation, B first", []bhcrypto.PresharedKey{k1}, []bhcrypto.PresharedKey{k2, k1}, false, 0, 1, 0, true},
		{"rotation, both", []bhcrypto.PresharedKey{k2, k1}, []bhcrypto.PresharedKey{k2, k1}, true, 0, 0, 0, true},
		{"keys differ", []bhcrypto.PresharedKey{k1}, []bhcrypto.PresharedKey{k3}, false, 0, 1, 0, true},
		{"only A has one", []bhcrypto.PresharedKey{k1}, nil, false, 0, 0, 1, true},
		{"only B has one", nil, []bhcrypto.PresharedKey{k1}, false, 0, 0, 1, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newKeyStep(t)
			h := s.h
			keyA, keyB := h.a.KeyRing().Current.Public, h.b.KeyRing().Current.Public
			ca := twoSiteConfig("site-a", keyA, keyB, h.bindA.local, h.bindB.local)
			ca.Sites[1].Gateways[0].PresharedKeys = tc.onA
			cb := twoSiteConfig("site-b", keyA, keyB, h.bindA.local, h.bindB.local)
			cb.Sites[0].Gateways[0].PresharedKeys = tc.onB
			if err := h.a.SetConfig(ca); err != nil {
				t.Fatal(err)
			}
			if err := h.b.SetConfig(cb); err != nil {
				t.Fatal(err)
			}
			now := h.now.Add(time.Second)
			if got := s.handshakeAB(now); got != tc.ok {
				t.Fatalf("handshake completed: %v, want %v", got, tc.ok)
			}
			p := h.a.state.Load().order[0]
			if got := p.Stats().HandshakesSecondPSK; got != tc.secondPSK {
				t.Errorf("second-key handshakes = %d, want %d", got, tc.secondPSK)
			}
			if got := h.a.drops.Get(Outside, ReasonPSKMismatch); got != tc.mismatchA {
				t.Errorf("A psk_mismatch = %d, want %d", got, tc.mismatchA)
			}
			if got := h.b.drops.Get(Outside, ReasonPSKMismatch); got != tc.mismatchB {
				t.Errorf("B psk_mismatch = %d, want %d", got, tc.mismatchB)
			}
			if got := p.Stats().PSKMismatches + h.b.state.Load().order[0].Stats().PSKMismatches; got != tc.mismatchA+tc.mismatchB {
				t.Errorf("per-peer mismatch counts = %d, want %d", got, tc.mismatchA+tc.mismatchB)
			}
			h.a.hs.initiate(p, now.Add(time.Second), true)
			if flag := h.bindA.last[1] == bhcrypto.FlagPSK; flag != tc.wantFlagPSKSet {
				t.Errorf("initiation byte 1 = %d: PSK flag %v, want %v", h.bindA.last[1], flag, tc.wantFlagPSKSet)
			}
		})
	}
}

func testPSK(t *testing.T) bhcrypto.PresharedKey {
	t.Helper()
	k, err := bhcrypto.GeneratePresharedKey(nil)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestSetKeyRingRefusals: a ring with another cipher or whose key is a
// peer's is refused and leaves the running ring.
func TestSetKeyRingRefusals(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	running := h.a.KeyRing()
	chacha := newIdentity(t, bhcrypto.ChaChaPoly)
	if err := h.a.SetKeyRing(running.Rotate(chacha, h.now.Add(time.Hour))); err == nil {
		t.Error("a new key with another cipher was accepted")
	}
	if err := h.a.SetKeyRing(bhcrypto.NewKeyRing(h.b.KeyRing().Current)); err == nil {
		t.Error("a peer's key was accepted as ours")
	}
	if h.a.KeyRing() != running {
		t.Error("a refused ring replaced the running one")
	}
}

// TestStaleInitiationRestarts: an initiation pending when the peer's key
// changes (a rollover in our config) is replaced by one to the new key at
// the next timer tick, not after RekeyTimeout; so is one made with our
// own key before we rotated it.
func TestStaleInitiationRestarts(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	p := h.a.state.Load().order[0]
	oldB := h.b.KeyRing().Current
	newB := newIdentity(t, bhcrypto.AESGCM)
	now := h.now
	h.a.hs.timers(now)
	if p.hs.pending != nil {
		t.Fatal("a handshake started with nothing changed")
	}
	h.a.hs.initiate(p, now, false)
	if in := p.hs.pending; in == nil || in.Peer() != oldB.Public {
		t.Fatal("no initiation pending to B's key")
	}
	if err := h.a.SetConfig(rotateConfig(h, h.a.KeyRing().Current.Public, newB.Public, oldB.Public, now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	now = now.Add(TimerTick)
	h.a.hs.timers(now)
	if in := p.hs.pending; in == nil || in.Peer() != newB.Public {
		t.Fatal("the initiation to B's old key was not replaced by one to its new key")
	}
	newA := newIdentity(t, bhcrypto.AESGCM)
	if err := h.a.SetKeyRing(h.a.KeyRing().Rotate(newA, now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	h.a.hs.timers(now.Add(TimerTick))
	if in := p.hs.pending; in == nil || in.Local() != newA.Public {
		t.Fatal("the initiation made with our old key was not replaced")
	}
	// With nothing pending, learning a peer's new key starts a handshake
	// to it at the next tick: the session moves to the new key at once.
	h.a.hs.dropPending(p)
	newerB := newIdentity(t, bhcrypto.AESGCM)
	if err := h.a.SetConfig(rotateConfig(h, newA.Public, newerB.Public, newB.Public, now.Add(time.Hour))); err != nil {
		t.Fatal(err)
	}
	h.a.hs.timers(now.Add(2 * TimerTick))
	if in := p.hs.pending; in == nil || in.Peer() != newerB.Public {
		t.Fatal("learning the peer's new key started no handshake to it")
	}
}
