package router

import (
	"net/netip"
	"slices"
	"time"
)

// KernelFilter is an early-drop filter on the outside socket (package
// earlydrop) that applies the outside path's first checks in the kernel.
// It needs to know which receiver indices are live and which endpoints
// belong to configured peers. The Router keeps it current, adds its drop
// counts to Drops (as runt, unknown_type, bad_size and unknown_index), and
// detaches it at the first failed update, so that a filter out of step
// with the sessions can never drop their traffic.
type KernelFilter interface {
	AddIndex(idx uint32) error
	RemoveIndex(idx uint32) error
	SetEndpoints(eps []netip.AddrPort) error
	// Block drops initiations and responses from addr for d, except
	// from configured peer endpoints.
	Block(addr netip.Addr, d time.Duration) error
	// Counts returns the drops so far by reason: runt, unknown type,
	// bad size, unknown index, blocked source.
	Counts() ([5]uint64, error)
	Detach() error
}

// filterReasons are the Drops reasons of the KernelFilter counts, in
// order. Handshakes from a blocked source count as rate_limited.
var filterReasons = [5]Reason{ReasonRunt, ReasonUnknownType, ReasonBadSize, ReasonUnknownIndex, ReasonRateLimited}

// A source that sends handshake messages with a bad mac1 faster than
// BadMACRate per second (after a burst of BadMACBurst) is blocked in the
// kernel filter for BlockBadMACFor: its initiations and responses are then
// dropped before they reach the socket, and counted as rate_limited. An
// honest gateway never sends a bad mac1 (one with the wrong key for us
// sends one per retransmission, every 5 s); configured peer endpoints are
// never blocked. This helps only against a flood from real source
// addresses: a flood with a new spoofed source per datagram still reaches
// the mac1 check in userspace.
const (
	BadMACRate     = 20
	BadMACBurst    = 100
	BlockBadMACFor = 10 * time.Second
	// maxBlocked bounds the sources this side remembers as blocked.
	maxBlocked = 4096
)

// noteBadMAC counts a bad-mac1 message from from and blocks its source in
// the kernel filter once it exceeds the rate. Called by the outside loop.
func (r *Router) noteBadMAC(from netip.AddrPort) {
	f := r.filter.Load()
	if f == nil || r.badMAC.Allow(from.Addr()) {
		return
	}
	a := from.Addr()
	now := r.clock.Now().UnixNano()
	r.blockMu.Lock()
	defer r.blockMu.Unlock()
	if until, ok := r.blockedUntil[a]; ok && until > now {
		return // blocked; this one was already on its way
	}
	if len(r.blockedUntil) >= maxBlocked {
		return
	}
	if err := (*f).Block(a, BlockBadMACFor); err != nil {
		r.detachFilter("blocking a source", err)
		return
	}
	r.blockedUntil[a] = now + int64(BlockBadMACFor)
	r.log.Warn("blocking handshake messages from a source sending bad MACs",
		"source", a, "for", BlockBadMACFor, "rate_above", BadMACRate)
}

// forgetBlocks drops expired entries of blockedUntil. Called by the
// handshake loop with the limiter GC.
func (r *Router) forgetBlocks(now time.Time) {
	r.blockMu.Lock()
	defer r.blockMu.Unlock()
	for a, until := range r.blockedUntil {
		if until <= now.UnixNano() {
			delete(r.blockedUntil, a)
		}
	}
}

// syncFilterIndices tells the kernel filter about receiver indices that
// appeared or went away. It runs under indexTable.mu, before the new table
// is published, so an index is known to the filter before any peer can be
// told about it.
func (r *Router) syncFilterIndices(old, cur map[uint32]indexEntry) {
	f := r.filter.Load()
	if f == nil {
		return
	}
	for idx := range cur {
		if _, ok := old[idx]; !ok {
			if err := (*f).AddIndex(idx); err != nil {
				r.detachFilter("adding a receiver index", err)
				return
			}
		}
	}
	for idx := range old {
		if _, ok := cur[idx]; !ok {
			// A stale index only costs a userspace lookup.
			if err := (*f).RemoveIndex(idx); err != nil {
				r.log.Warn("kernel filter: removing a receiver index failed", "err", err)
			}
		}
	}
}

// syncFilterEndpoints gives the kernel filter the configured endpoints.
func (r *Router) syncFilterEndpoints(st *routingState) {
	f := r.filter.Load()
	if f == nil {
		return
	}
	eps := make([]netip.AddrPort, 0, len(st.byEndpoint))
	for ep := range st.byEndpoint {
		eps = append(eps, ep)
	}
	slices.SortFunc(eps, func(a, b netip.AddrPort) int { return a.Compare(b) })
	if err := (*f).SetEndpoints(eps); err != nil {
		r.detachFilter("setting peer endpoints", err)
	}
}

// detachFilter stops kernel filtering for good: every datagram is checked
// in userspace again.
func (r *Router) detachFilter(what string, err error) {
	f := r.filter.Swap(nil)
	if f == nil {
		return
	}
	r.collectFilterDrops(*f)
	derr := (*f).Detach()
	r.log.Error("kernel filter detached; checking every datagram in userspace", "while", what, "err", err, "detach_err", derr)
}

// pollFilter adds the kernel filter's new drops to Drops. The handshake
// loop calls it every tick.
func (r *Router) pollFilter() {
	if f := r.filter.Load(); f != nil {
		r.collectFilterDrops(*f)
	}
}

func (r *Router) collectFilterDrops(f KernelFilter) {
	r.filterMu.Lock()
	defer r.filterMu.Unlock()
	c, err := f.Counts()
	if err != nil {
		return
	}
	for i, n := range c {
		if n > r.filterSeen[i] {
			r.drops.Add(Outside, filterReasons[i], n-r.filterSeen[i])
			r.filterSeen[i] = n
		}
	}
}

// FilterAttached reports whether a kernel filter is in use.
func (r *Router) FilterAttached() bool { return r.filter.Load() != nil }
