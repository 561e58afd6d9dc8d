package router

import (
	"sync"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// keypairs is one peer's sessions and the one place they rotate.
//
// Readers (the data path, pick, Stats) load current, previous and next
// atomically and take no lock. Every write goes through the methods
// below, which hold mu from the read that decides to the last write, so
// the rotations of the handshake loop (establish, answer, expire), of the
// outside loop (confirm) and of SetConfig (close) never interleave and a
// decision made on a stale value never overwrites a newer session.
//
// The methods do not touch the index table: they return the sessions
// that left, and the caller retires them after mu is released. A caller
// installing a session adds it to the index table first and retires it
// again if the install is refused (the peer was removed), so an index
// never outlives its peer's removal: close runs after any install it did
// not refuse, and its caller retires what that install left.
type keypairs struct {
	mu sync.Mutex
	// current is the session senders use. previous keeps receiving
	// packets still in flight after a rotation. next is a session we
	// answered as responder: it becomes current on its first
	// authenticated packet (key confirmation).
	current, previous, next atomic.Pointer[bhcrypto.Keypair]
	closed                  bool // under mu: the peer was removed; nothing is installed any more
}

// establish makes kp, a handshake we initiated and completed, the current
// session; the old current becomes previous. It returns the session that
// left (the old previous), or ok=false, installing nothing, once closed.
func (k *keypairs) establish(kp *bhcrypto.Keypair) (gone *bhcrypto.Keypair, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, false
	}
	gone = k.previous.Swap(k.current.Swap(kp))
	return gone, true
}

// answer makes kp, a handshake we answered, the next session, replacing
// an unconfirmed one. It returns the replaced one, or ok=false once
// closed.
func (k *keypairs) answer(kp *bhcrypto.Keypair) (gone *bhcrypto.Keypair, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed {
		return nil, false
	}
	return k.next.Swap(kp), true
}

// confirm promotes kp to current if it is still the next session; the old
// current becomes previous. It returns the session that left and whether
// kp was promoted.
func (k *keypairs) confirm(kp *bhcrypto.Keypair) (gone *bhcrypto.Keypair, ok bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.closed || !k.next.CompareAndSwap(kp, nil) {
		return nil, false
	}
	return k.previous.Swap(k.current.Swap(kp)), true
}

// expire forgets, at now, current and previous once current is wipeAfter
// old (since its handshake), and an unconfirmed next once it is
// RejectAfterTime old. It returns what it forgot. The age is checked on
// the value it removes, under mu: a session confirmed or established a
// moment before is never wiped for the age of the one it replaced.
func (k *keypairs) expire(now time.Time) (gone [3]*bhcrypto.Keypair) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if kp := k.current.Load(); kp != nil && now.Sub(kp.Created) >= wipeAfter {
		gone[0], gone[1] = k.current.Swap(nil), k.previous.Swap(nil)
	}
	if kp := k.next.Load(); kp != nil && now.Sub(kp.Created) >= RejectAfterTime {
		gone[2] = k.next.Swap(nil)
	}
	return gone
}

// close forgets every session for good: the peer was removed. Later
// installs are refused.
func (k *keypairs) close() (gone [3]*bhcrypto.Keypair) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.closed = true
	return [3]*bhcrypto.Keypair{k.current.Swap(nil), k.previous.Swap(nil), k.next.Swap(nil)}
}
