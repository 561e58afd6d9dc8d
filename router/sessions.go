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
	return e.kp, e.peer.PublicKey(), true
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

// PeerUp reports whether the gateway of key is up: it answered our
// probes within ProbeMisses intervals (see liveness). A spoke sends
// relayed flows only through hub gateways that are up, while one is.
func (r *Router) PeerUp(key bhcrypto.PublicKey) bool {
	p := r.state.Load().peers[key]
	return p != nil && p.live.up()
}

// NoteRelayed counts n relay messages carrying bytes inner bytes that
// were sent to the gateway of key for other gateways (it is their hub).
// They are traffic toward it like any other: its liveness probes it at
// the active pace while they flow, so a dead hub gateway is noticed
// within ProbeMisses intervals, and they keep its NAT mapping open.
func (r *Router) NoteRelayed(key bhcrypto.PublicKey, n, bytes uint64) {
	p := r.state.Load().peers[key]
	if p == nil {
		return
	}
	p.txPackets.Add(n)
	p.txBytes.Add(bytes)
	p.lastSend.Store(r.mono.ns(r.clock.Now()))
}
