package router

import (
	"net/netip"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Sessions for the relay path (package transit, its SessionTable): a hub
// authenticates a relay message with the session its receiver index
// names and reseals it with its current session with the destination; a
// spoke wraps what it sends through a hub with its current session with
// the hub. Both methods are safe for concurrent use and do not allocate.

// SessionByIndex returns the session whose local index is idx and the
// static key of the gateway it is with.
func (r *Router) SessionByIndex(idx uint32) (*bhcrypto.Keypair, bhcrypto.PublicKey, bool) {
	e, ok := r.index.lookup(idx)
	if !ok || r.clock.Now().Sub(e.kp.Created) >= RejectAfterTime {
		return nil, bhcrypto.PublicKey{}, false
	}
	return e.kp, e.peer.key, true
}

// CurrentSession returns the session to send to the gateway of key on and
// its endpoint (where it was last heard from, or its configured one).
func (r *Router) CurrentSession(key bhcrypto.PublicKey) (*bhcrypto.Keypair, netip.AddrPort, bool) {
	p := r.state.Load().peers[key]
	if p == nil {
		return nil, netip.AddrPort{}, false
	}
	kp := p.current.Load()
	if kp == nil || !usable(kp, r.clock.Now()) {
		return nil, netip.AddrPort{}, false
	}
	return kp, p.Endpoint(), true
}
