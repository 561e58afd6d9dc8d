package router

import (
	"sync"
	"sync/atomic"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// indexEntry ties a receiver index to its session and peer.
type indexEntry struct {
	peer *Peer
	kp   *bhcrypto.Keypair
}

// indexTable maps our receiver indices to sessions.
//
// Reads (one per received datagram) load an immutable map through an atomic
// pointer and take no lock. Writes (a few per handshake) copy the map under
// a mutex. Sessions are few, so copying is cheap.
type indexTable struct {
	mu sync.Mutex
	m  atomic.Pointer[map[uint32]indexEntry]
	// onChange, if set, sees every update before it is published, with
	// the old and the new map (both read-only), under mu; the function
	// it returns, if any, runs after publishing, still under mu.
	onChange func(old, cur map[uint32]indexEntry) (after func())
}

func (t *indexTable) lookup(idx uint32) (indexEntry, bool) {
	m := t.m.Load()
	if m == nil {
		return indexEntry{}, false
	}
	e, ok := (*m)[idx]
	return e, ok
}

func (t *indexTable) has(idx uint32) bool {
	_, ok := t.lookup(idx)
	return ok
}

// update applies changes to a copy of the map and publishes it.
func (t *indexTable) update(f func(m map[uint32]indexEntry)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	old := t.m.Load()
	n := make(map[uint32]indexEntry)
	if old != nil {
		for k, v := range *old {
			n[k] = v
		}
	}
	f(n)
	var after func()
	if t.onChange != nil {
		var o map[uint32]indexEntry
		if old != nil {
			o = *old
		}
		after = t.onChange(o, n)
	}
	t.m.Store(&n)
	if after != nil {
		after()
	}
}

func (t *indexTable) len() int {
	m := t.m.Load()
	if m == nil {
		return 0
	}
	return len(*m)
}
