package router

import (
	"sync"
	"sync/atomic"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// indexEntry ties a receiver index to its session and peer.
type indexEntry struct {
	idx  uint32
	peer *Peer
	kp   *bhcrypto.Keypair
	// windows are the session's replay windows for messages with a
	// lane byte, one per receiving lane (see laneWindows); lanes is the
	// Router's lane count. Messages without one use kp's window.
	windows []laneWindow
	lanes   int
	// express is the replay window of messages on the express lane
	// (udp.ExpressLane), nil when the Router has none: they reach their
	// own socket, and so overtake the lanes' queues.
	express *laneWindow
}

// indexTable maps our receiver indices to sessions.
//
// It is an open-addressing hash table (linear probing) whose slots are
// atomic pointers to immutable entries, each carrying its own index.
// Reads (one per received datagram) load the table and probe it without a
// lock and without allocating; a reader sees every slot either before or
// after a write, and an entry it finds is whole. Writes (a few per
// handshake) take mu and touch one slot: the cost of a handshake does not
// grow with the number of sessions, where copying a map did (O(sessions)
// per handshake, which dominated restart storms with hundreds of peers).
// A removed entry leaves a tombstone so probes go on past it; when used
// and dead slots pass half the table, it is rebuilt (doubled if the live
// entries need it) and published whole: amortized O(1) per write.
// Readers that loaded the old table finish on it, as they did on an old
// copy of the map.
//
// The table's indices are random (newIndex), so the low bits spread them.
type indexTable struct {
	mu  sync.Mutex
	tab atomic.Pointer[indexSlots]
	// Under mu:
	live, dead int // live entries and tombstones in tab
	// onAdd, if set, sees every index before it is published, under
	// mu; onRemove sees the indices that left, after they were
	// unpublished, still under mu.
	onAdd    func(idx uint32)
	onRemove func(idxs []uint32)
	// lanes is the Router's lane count, express whether it has an
	// express lane; both set by New before any add.
	lanes   int
	express bool
}

type indexSlots struct {
	slots []atomic.Pointer[indexEntry]
	mask  uint32
}

// indexTombstone marks a removed entry: probes continue past it.
var indexTombstone = &indexEntry{}

const indexMinSlots = 64

func (s *indexSlots) find(idx uint32) (*indexEntry, uint32, bool) {
	for i := idx & s.mask; ; i = (i + 1) & s.mask {
		e := s.slots[i].Load()
		if e == nil {
			return nil, i, false
		}
		if e != indexTombstone && e.idx == idx {
			return e, i, true
		}
	}
}

func (t *indexTable) lookup(idx uint32) (indexEntry, bool) {
	s := t.tab.Load()
	if s == nil {
		return indexEntry{}, false
	}
	e, _, ok := s.find(idx)
	if !ok {
		return indexEntry{}, false
	}
	return *e, true
}

func (t *indexTable) has(idx uint32) bool {
	_, ok := t.lookup(idx)
	return ok
}

// add publishes kp of p under kp.LocalIndex, replacing an entry with the
// same index.
func (t *indexTable) add(p *Peer, kp *bhcrypto.Keypair) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.onAdd != nil {
		t.onAdd(kp.LocalIndex)
	}
	t.grow(1)
	s := t.tab.Load()
	e := &indexEntry{idx: kp.LocalIndex, peer: p, kp: kp, windows: laneWindows(t.lanes), lanes: t.lanes}
	if t.express {
		e.express = new(laneWindow)
	}
	if _, i, ok := s.find(kp.LocalIndex); ok {
		s.slots[i].Store(e)
		return
	}
	// A free slot: the first tombstone on the probe path, or the empty
	// slot that ended it.
	for i := kp.LocalIndex & s.mask; ; i = (i + 1) & s.mask {
		switch s.slots[i].Load() {
		case indexTombstone:
			t.dead--
		case nil:
		default:
			continue
		}
		s.slots[i].Store(e)
		t.live++
		return
	}
}

// remove unpublishes the given sessions, each only if its index still
// maps to it (a newer session may have taken the index over).
func (t *indexTable) remove(kps ...*bhcrypto.Keypair) {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := t.tab.Load()
	if s == nil {
		return
	}
	var gone []uint32
	for _, kp := range kps {
		if kp == nil {
			continue
		}
		if e, i, ok := s.find(kp.LocalIndex); ok && e.kp == kp {
			s.slots[i].Store(indexTombstone)
			t.live--
			t.dead++
			gone = append(gone, kp.LocalIndex)
		}
	}
	if len(gone) > 0 && t.onRemove != nil {
		t.onRemove(gone)
	}
}

// grow makes room for n more entries: it rebuilds the table when live,
// dead and new slots would pass half of it. Called under mu.
func (t *indexTable) grow(n int) {
	s := t.tab.Load()
	if s != nil && 2*(t.live+t.dead+n) <= len(s.slots) {
		return
	}
	size := indexMinSlots
	for 4*(t.live+n) > size { // at most a quarter full after a rebuild
		size *= 2
	}
	ns := &indexSlots{slots: make([]atomic.Pointer[indexEntry], size), mask: uint32(size - 1)}
	if s != nil {
		for i := range s.slots {
			if e := s.slots[i].Load(); e != nil && e != indexTombstone {
				_, j, _ := ns.find(e.idx)
				ns.slots[j].Store(e)
			}
		}
	}
	t.dead = 0
	t.tab.Store(ns)
}

func (t *indexTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.live
}
