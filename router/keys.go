package router

import (
	"encoding/binary"
	"errors"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Static keys and preshared keys: this gateway's KeyRing and each peer's
// peerKeys. Both are immutable values swapped whole, so a rotation never
// touches a session: keypairs live on, and the next handshake (a rekey,
// or a new session) uses the new key.
//
//   - Our own keys: Router.keys holds a bhcrypto.KeyRing. The handshake
//     loop answers initiations made to either key of the ring (the
//     initiation's mac1 names the key, so that costs no trial
//     Diffie-Hellman) and initiates with the current key only. It drops
//     the previous key when its overlap ends (expireKeys).
//   - A peer's keys: during a peer's rollover the config names its
//     current and previous key; initiations from either are accepted
//     until the previous one's overlap ends, and ours go to the current
//     one. A reload that names the running peer's key as its previous
//     key keeps the Peer (buildState).
//   - Preshared keys: the first answers, each is tried on a response (at
//     most bhcrypto.MaxPresharedKeys, with no extra Diffie-Hellman). A
//     handshake in the wrong mode or with a key that differs is dropped
//     as psk_mismatch, counted per peer, and logged at most once per
//     pskLogEvery per peer.

// pskLogEvery bounds the log lines about one peer's preshared-key
// mismatches and expired keys: a misconfigured pair retries every
// RekeyTimeout, and one line a minute says it.
const pskLogEvery = time.Minute

// peerKeys is what a peer's handshakes are checked and made with. It is
// immutable: SetConfig stores a new one.
type peerKeys struct {
	cur       bhcrypto.PublicKey
	prev      bhcrypto.PublicKey // zero outside a rollover
	prevUntil time.Time
	psks      []bhcrypto.PresharedKey
	// jar holds cookies the peer gave us under load, for mac2. Keyed by
	// cur: a new one comes with a new current key.
	jar *bhcrypto.CookieJar
}

// accepts reports whether an initiation from key may open a session at
// now: the current key always, the previous one during its overlap.
func (k *peerKeys) accepts(key bhcrypto.PublicKey, now time.Time) (ok, previous bool) {
	if key == k.cur {
		return true, false
	}
	return key == k.prev && now.Before(k.prevUntil), true
}

// setKeys stores c's keys as p's. old is p's keys before (nil for a new
// peer): its cookie jar is kept while the current key stays the same.
// The rank follows the current key.
func (p *Peer) setKeys(c PeerConfig, old *peerKeys, now func() time.Time) {
	k := &peerKeys{cur: c.PublicKey, psks: append([]bhcrypto.PresharedKey(nil), c.PresharedKeys...)}
	if !c.PreviousPublicKey.IsZero() && c.PreviousPublicKey != c.PublicKey {
		k.prev, k.prevUntil = c.PreviousPublicKey, c.PreviousUntil
	}
	if old != nil && old.cur == c.PublicKey {
		k.jar = old.jar
	} else {
		k.jar = bhcrypto.NewCookieJar(c.PublicKey, now)
	}
	p.keys.Store(k)
	p.rank.Store(binary.LittleEndian.Uint64(c.PublicKey[:8]))
	if old != nil && old.cur != c.PublicKey {
		p.keyChanged.Store(true)
	}
}

// noteKeyProblem counts and, at most once per pskLogEvery, logs a
// handshake with p refused or failed for its keys. Handshake loop.
func (h *handshaker) noteKeyProblem(p *Peer, reason Reason, msg string, now time.Time) {
	h.r.drops.Add(Outside, reason, 1)
	if reason == ReasonPSKMismatch {
		p.hsPSKMismatch.Add(1)
	}
	last := &p.hs.lastKeyLog[0]
	if reason == ReasonPSKMismatch {
		last = &p.hs.lastKeyLog[1]
	}
	if !last.IsZero() && now.Sub(*last) < pskLogEvery {
		return
	}
	*last = now
	h.r.log.Warn(msg, "site", p.site, "gateway", p.name, "reason", reason.String(),
		"psk_mismatches", p.hsPSKMismatch.Load())
}

// KeyRing returns this gateway's static keys.
func (r *Router) KeyRing() *bhcrypto.KeyRing { return r.keys.Load() }

// SetKeyRing makes ring this gateway's static keys: new handshakes are
// initiated with ring.Current, and initiations made to ring.Previous are
// answered until ring.PreviousUntil. Sessions are kept. The ring must
// keep the cipher and prologue (they are restart-only); its current key
// must not be a configured peer's.
func (r *Router) SetKeyRing(ring *bhcrypto.KeyRing) error {
	if ring == nil || ring.Current == nil {
		return errors.New("router: key ring without a current identity")
	}
	for _, id := range []*bhcrypto.Identity{ring.Current, ring.Previous} {
		if id == nil {
			continue
		}
		if err := id.Validate(); err != nil {
			return err
		}
		cur := r.keys.Load().Current
		if id.Cipher != cur.Cipher || string(id.Prologue) != string(cur.Prologue) {
			return errors.New("router: a new static key must keep the cipher and cluster name")
		}
	}
	r.cfgMu.Lock()
	defer r.cfgMu.Unlock()
	if p := r.state.Load().peers[ring.Current.Public]; p != nil {
		return errors.New("router: the new static key is gateway " + p.site + "/" + p.name + "'s")
	}
	old := r.keys.Swap(ring)
	if old.Current.Public != ring.Current.Public {
		r.log.Info("static key rotated", "public_key", ring.Current.Public.String(),
			"previous_key", old.Current.Public.String(), "previous_until", ring.PreviousUntil)
	}
	return nil
}

// staleInitiation reports whether p's pending initiation was made with a
// key that changed since (ours or the peer's): its response can complete
// nothing the peer still accepts, so the timers start a new attempt at
// once instead of after RekeyTimeout. Handshake loop.
func (h *handshaker) staleInitiation(p *Peer) bool {
	in := p.hs.pending
	return in != nil && (in.Peer() != p.PublicKey() || in.Local() != h.r.keys.Load().Current.Public)
}

// expireKeys drops our previous static key once its overlap is over.
// Handshake loop (timers).
func (h *handshaker) expireKeys(now time.Time) {
	ring := h.r.keys.Load()
	next := ring.Expire(now)
	if next != ring && h.r.keys.CompareAndSwap(ring, next) {
		h.r.log.Info("previous static key retired: handshakes made to it are refused", "previous_key", ring.Previous.Public.String())
	}
}

// sameGateway reports whether gc is the running peer p: the same key, or
// a rollover from it (gc's previous key is p's current one, or both name
// the same previous key). A new key with no rollover (a reimaged gateway
// whose old key is gone) is a new peer: nothing of the old one's sessions
// can be trusted to belong to it.
func sameGateway(p *Peer, gc PeerConfig) bool {
	k := p.keys.Load()
	switch {
	case gc.PublicKey == k.cur:
		return true
	case gc.PreviousPublicKey.IsZero():
		return false
	}
	return gc.PreviousPublicKey == k.cur || gc.PreviousPublicKey == k.prev
}

// checkPeerKeys refuses a peer whose previous key is another gateway's or
// our own, and more preshared keys than a handshake tries.
func checkPeerKeys(gc PeerConfig, own bhcrypto.PublicKey, peers map[bhcrypto.PublicKey]*Peer) error {
	if len(gc.PresharedKeys) > bhcrypto.MaxPresharedKeys {
		return errors.New("more than two preshared keys")
	}
	if gc.PreviousPublicKey.IsZero() || gc.PreviousPublicKey == gc.PublicKey {
		return nil
	}
	if gc.PreviousPublicKey == own {
		return errors.New("previous public key is this gateway's own key")
	}
	if _, dup := peers[gc.PreviousPublicKey]; dup {
		return errors.New("previous public key used twice")
	}
	return nil
}
