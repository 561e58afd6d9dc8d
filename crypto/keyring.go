package crypto

import (
	"time"
)

// DefaultKeyOverlap is how long a gateway that got a new static key keeps
// answering handshakes made to its previous one, and how long its peers
// accept the previous one from it. A day: every peer must learn the new
// key (a catalog reload, a Kubernetes watch, or a peer that was down
// overnight coming back) before the old one stops working, while a key
// taken out of service, perhaps because it leaked, stops opening
// sessions soon. Sessions themselves move to the new key within
// RejectAfterTime (minutes) of the rotation; the overlap covers
// stale catalogs, not sessions.
const DefaultKeyOverlap = 24 * time.Hour

// KeyRing is a gateway's static identities: Current, which it initiates
// with and answers first, and during a key rollover Previous, which it
// still answers until PreviousUntil. Build a new KeyRing to change it;
// one in use is read-only and may be shared by any number of goroutines.
//
// The responder needs no trial Diffie-Hellman to pick the key: an
// initiation's mac1 is keyed by the responder's public key it was made
// for (package documentation, "MACs"), so Select finds the identity with
// at most two BLAKE2s passes.
type KeyRing struct {
	Current       *Identity
	Previous      *Identity // nil outside a rollover
	PreviousUntil time.Time // Previous is refused from this time on
}

// NewKeyRing returns a ring of one identity.
func NewKeyRing(id *Identity) *KeyRing { return &KeyRing{Current: id} }

// Rotate returns a ring whose Current is next and whose Previous is r's
// Current, answered until until. A rotation during an overlap drops r's
// Previous: a gateway answers two keys at most.
func (r *KeyRing) Rotate(next *Identity, until time.Time) *KeyRing {
	if next.Public == r.Current.Public {
		return r
	}
	return &KeyRing{Current: next, Previous: r.Current, PreviousUntil: until}
}

// PreviousLive reports whether r has a Previous identity that may still
// answer at now.
func (r *KeyRing) PreviousLive(now time.Time) bool {
	return r.Previous != nil && now.Before(r.PreviousUntil)
}

// Expire returns r without its Previous identity once the overlap is over
// at now, and r itself otherwise.
func (r *KeyRing) Expire(now time.Time) *KeyRing {
	if r.Previous == nil || r.PreviousLive(now) {
		return r
	}
	return &KeyRing{Current: r.Current}
}

// Select returns the identity a handshake message is addressed to, by its
// mac1: Current first, then Previous while it is live. previous reports
// that it is Previous. A message made for Previous after its overlap
// returns ErrKeyExpired, any other ErrMAC1. msg is only read.
func (r *KeyRing) Select(msg []byte, now time.Time) (id *Identity, previous bool, err error) {
	if CheckMAC1(msg, r.Current.Public) {
		return r.Current, false, nil
	}
	if r.Previous != nil && CheckMAC1(msg, r.Previous.Public) {
		if !r.PreviousLive(now) {
			return nil, true, ErrKeyExpired
		}
		return r.Previous, true, nil
	}
	return nil, false, ErrMAC1
}

// ConsumeInitiation is Identity.ConsumeInitiation with the identity the
// initiation is addressed to (Select); ri.Previous says which one. The
// response must come from ri (CreateResponse on either identity of the
// ring uses the one that read it).
func (r *KeyRing) ConsumeInitiation(msg []byte, now time.Time) (*ReceivedInitiation, error) {
	if len(msg) != InitiationSize {
		return nil, ErrMessageSize
	}
	if err := checkInitiationHeader(msg); err != nil {
		return nil, err
	}
	id, prev, err := r.Select(msg, now)
	if err != nil {
		return nil, err
	}
	ri, err := id.ConsumeInitiation(msg)
	if err != nil {
		return nil, err
	}
	ri.Previous = prev
	return ri, nil
}
