package router

import (
	"sync/atomic"

	"github.com/bridgehead/bridgehead/router/packet"
)

// fragSlots is how many fragmented datagrams flowHasher remembers: the
// ones whose first fragment went out most recently. A datagram's
// fragments leave the sending host back to back, so a later fragment
// finds its first one unless more than this many fragmented datagrams
// were routed between them. 16 KiB, allocated once with the Router.
const fragSlots = 1024

// flowHasher gives every packet of a flow the same hash, fragments
// included, for site.pick.
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
// The table is written and read by the inside path only, which routes
// one batch at a time (insidePipe.mu); the slots are atomic so that tests
// calling route from several goroutines stay race-free. A torn read (key
// of one datagram, hash of another) can only misplace a fragment, never
// misroute a packet to the wrong site. It allocates nothing.
type flowHasher struct {
	seed   uint64 // set by New, then read-only
	frags  [fragSlots]fragSlot
	misses atomic.Uint64 // later fragments whose first was not found
}

type fragSlot struct{ key, flow atomic.Uint64 }

// hash returns the flow hash of pkt. A malformed packet still gets a
// stable hash (of whatever FlowHashFragment made of it).
func (f *flowHasher) hash(pkt []byte) uint64 {
	h, key, frag, _ := packet.FlowHashFragment(pkt, f.seed)
	switch frag {
	case packet.FirstFragment:
		s := &f.frags[key%fragSlots]
		s.key.Store(key)
		s.flow.Store(h)
	case packet.LaterFragment:
		s := &f.frags[key%fragSlots]
		if s.key.Load() == key {
			return s.flow.Load()
		}
		f.misses.Add(1)
	}
	return h
}
