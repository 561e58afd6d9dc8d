package flowhash

import (
	"sync/atomic"

	"github.com/bridgehead/bridgehead/packet"
)

// Slots is how many fragmented datagrams a Table remembers: the ones
// whose first fragment went out most recently on its lane. A datagram's
// fragments leave the sending host back to back, so a later fragment
// finds its first one unless more than this many fragmented datagrams
// were routed on the lane between them. 16 KiB per lane, allocated once
// with the lane's inside path.
const Slots = 1024

// Hasher is what every lane shares: the seed (set by New, read-only
// afterwards) and the count of later fragments whose first was not found
// (any Table adds, Misses reads). Safe for concurrent use.
//
// Its tables are one per inside lane, never shared: the kernel puts
// every fragment of a datagram on one TUN queue (it hashes fragments by
// addresses and protocol), so one lane sees them all. A table shared by
// the lanes let one lane's datagram take the slot of another's between
// its first and later fragments, which then left through different
// gateways.
type Hasher struct {
	seed   uint64
	misses atomic.Uint64
}

// New returns a Hasher whose hashes are keyed by seed.
func New(seed uint64) *Hasher { return &Hasher{seed: seed} }

// Seed is the key of h's hashes.
func (h *Hasher) Seed() uint64 { return h.seed }

// Misses is how many later fragments, over all of h's tables, did not
// find their first fragment. Any goroutine.
func (h *Hasher) Misses() uint64 { return h.misses.Load() }

// NewTable returns a fragment table for one lane.
func (h *Hasher) NewTable() *Table { return &Table{h: h} }

// Table is one inside lane's fragment table (see Hasher). It is owned by
// the one goroutine that hashes the lane's packets in the order they were
// read, so it needs no lock. It allocates nothing.
type Table struct {
	h     *Hasher
	slots [Slots]slot
}

type slot struct{ key, flow uint64 }

// Hash returns the flow hash of pkt. A malformed packet still gets a
// stable hash (of whatever packet.FlowHashFragment made of it).
func (t *Table) Hash(pkt []byte) uint64 {
	h, key, frag, _ := packet.FlowHashFragment(pkt, t.h.seed)
	switch frag {
	case packet.FirstFragment:
		t.slots[key%Slots] = slot{key: key, flow: h}
	case packet.LaterFragment:
		if s := &t.slots[key%Slots]; s.key == key {
			return s.flow
		}
		t.h.misses.Add(1)
	}
	return h
}
