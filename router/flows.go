package router

import (
	"sync/atomic"

	"github.com/bridgehead/bridgehead/packet"
)

// fragSlots is how many fragmented datagrams a fragTable remembers: the
// ones whose first fragment went out most recently on its lane. A
// datagram's fragments leave the sending host back to back, so a later
// fragment finds its first one unless more than this many fragmented
// datagrams were routed on the lane between them. 16 KiB per lane,
// allocated once with the lane's inside path.
const fragSlots = 1024

// flowHasher is what every lane shares to give every packet of a flow
// the same hash, fragments included, for site.pick: the seed (set by New,
// read-only afterwards) and the count of later fragments whose first was
// not found (misses: any lane adds, the metrics read).
//
// Whole packets and first fragments hash by their 5-tuple
// (packet.FlowHashFragment). A later fragment carries no ports: it gets
// the hash its datagram's first fragment got, looked up by the
// datagram's key (addresses, protocol, identification) in a small
// direct-mapped table, and falls back to the 3-tuple hash when the first
// fragment was not seen (it came later, or its slot was taken since).
// The alternative, hashing every packet of a fragmenting protocol by
// addresses alone, would put all UDP between two hosts (every VXLAN
// tunnel between two nodes) on one gateway.
//
// That table is one per inside lane (fragTable), never shared: the
// kernel puts every fragment of a datagram on one TUN queue (it hashes
// fragments by addresses and protocol), so one lane sees them all. A
// table shared by the lanes let one lane's datagram take the slot of
// another's between its first and later fragments, which then left
// through different gateways.
type flowHasher struct {
	seed   uint64
	misses atomic.Uint64
}

// newTable returns a fragment table for one lane.
func (f *flowHasher) newTable() *fragTable { return &fragTable{f: f} }

// fragTable is one inside lane's fragment table (see flowHasher). It is
// owned by the one goroutine that hashes the lane's packets in the order
// they were read: the fair-queue reader (fqPipe), whoever holds
// insidePipe.mu (the pipeline), or the express lane's inside loop; so it
// needs no lock. It allocates nothing.
type fragTable struct {
	f     *flowHasher
	slots [fragSlots]fragSlot
}

type fragSlot struct{ key, flow uint64 }

// hash returns the flow hash of pkt. A malformed packet still gets a
// stable hash (of whatever FlowHashFragment made of it).
func (t *fragTable) hash(pkt []byte) uint64 {
	h, key, frag, _ := packet.FlowHashFragment(pkt, t.f.seed)
	switch frag {
	case packet.FirstFragment:
		t.slots[key%fragSlots] = fragSlot{key: key, flow: h}
	case packet.LaterFragment:
		if s := &t.slots[key%fragSlots]; s.key == key {
			return s.flow
		}
		t.f.misses.Add(1)
	}
	return h
}
