package router

import (
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
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

// kernelFilter keeps an optional KernelFilter in step with the router:
// receiver indices (from the index table, under its lock), peer endpoints
// (SetConfig), source blocks (sourceBlocker); it folds the filter's counts
// into drops and detaches it at the first failed update. Any goroutine
// may call its methods: f, stale and the filter's own calls are safe for
// concurrent use, and mu guards seen and retry.
type kernelFilter struct {
	log   *slog.Logger
	drops *Drops
	// live reports whether a receiver index is still in use (the index
	// table's has).
	live func(idx uint32) bool

	// f is the filter, nil when there is none or after it was detached.
	f     atomic.Pointer[KernelFilter]
	stale atomic.Bool // a detach failed; poll retries

	mu sync.Mutex
	// seen is how much of the filter's counts drops already has.
	seen [5]uint64
	// retry are receiver indices the filter failed to learn while it
	// could not be detached; poll adds them again until it is detached.
	retry map[uint32]bool
}

// newKernelFilter returns the keeper of f (nil: no filter).
func newKernelFilter(f KernelFilter, log *slog.Logger, drops *Drops, live func(uint32) bool) *kernelFilter {
	k := &kernelFilter{log: log, drops: drops, live: live}
	if f != nil {
		k.f.Store(&f)
	}
	return k
}

// attached reports whether a kernel filter is in use.
func (k *kernelFilter) attached() bool { return k.f.Load() != nil }

// block blocks handshakes from a for d in the filter and reports whether
// it did; a failure detaches the filter.
func (k *kernelFilter) block(a netip.Addr, d time.Duration) bool {
	f := k.f.Load()
	if f == nil {
		return false
	}
	if err := (*f).Block(a, d); err != nil {
		k.detach("blocking a source", err)
		return false
	}
	return true
}

// addIndex tells the kernel filter about a receiver index before it
// is published. It runs under indexTable.mu, so an index is known to the
// filter before any peer can be told about it.
func (k *kernelFilter) addIndex(idx uint32) {
	f := k.f.Load()
	if f == nil {
		return
	}
	if err := (*f).AddIndex(idx); err != nil {
		k.detach("adding a receiver index", err)
		if k.f.Load() == nil {
			return
		}
		// Still on the socket: it would drop this session's packets.
		// poll retries the index along with the detach.
		k.mu.Lock()
		if k.retry == nil {
			k.retry = make(map[uint32]bool)
		}
		k.retry[idx] = true
		k.mu.Unlock()
	}
}

// removeIndices tells the kernel filter about receiver indices that
// left the published table (under indexTable.mu, so they stayed known
// while it had them). A stale index only costs a userspace lookup: a
// failure is logged once per call, not per index.
func (k *kernelFilter) removeIndices(idxs []uint32) {
	f := k.f.Load()
	if f == nil {
		return
	}
	failed := 0
	var first error
	for _, idx := range idxs {
		if err := (*f).RemoveIndex(idx); err != nil {
			if failed++; first == nil {
				first = err
			}
		}
	}
	if failed > 0 {
		k.log.Warn("kernel filter: removing receiver indices failed", "count", failed, "err", first)
	}
}

// syncEndpoints gives the kernel filter the configured endpoints of
// st (plus, with also, those of the state still published, so that none
// is missing while both may be in use).
func (k *kernelFilter) syncEndpoints(st, also *routingState) {
	f := k.f.Load()
	if f == nil {
		return
	}
	eps := make([]netip.AddrPort, 0, len(st.byEndpoint))
	for ep := range st.byEndpoint {
		eps = append(eps, ep)
	}
	if also != nil {
		for ep := range also.byEndpoint {
			if st.byEndpoint[ep] == nil {
				eps = append(eps, ep)
			}
		}
	}
	slices.SortFunc(eps, func(a, b netip.AddrPort) int { return a.Compare(b) })
	if err := (*f).SetEndpoints(eps); err != nil {
		k.detach("setting peer endpoints", err)
	}
}

// detach stops kernel filtering for good: every datagram is checked
// in userspace again. If the kernel refuses to detach it, the filter stays
// in use (kept in step as far as it goes) and poll retries.
func (k *kernelFilter) detach(what string, err error) {
	f := k.f.Load()
	if f == nil {
		return
	}
	if derr := (*f).Detach(); derr != nil {
		if !k.stale.Swap(true) {
			k.log.Error("kernel filter out of step and could not be detached; retrying",
				"while", what, "err", err, "detach_err", derr)
		}
		return
	}
	if !k.f.CompareAndSwap(f, nil) {
		return // another caller detached it
	}
	k.stale.Store(false)
	// Counted after detaching, so that no drop is left behind.
	k.collectDrops(*f)
	k.log.Error("kernel filter detached; checking every datagram in userspace", "while", what, "err", err)
}

// poll adds the kernel filter's new drops to Drops, and retries a
// detach the kernel refused. The handshake loop calls it every tick, and
// the metrics collector before each scrape.
func (k *kernelFilter) poll() {
	f := k.f.Load()
	if f == nil {
		return
	}
	if k.stale.Load() {
		k.detach("retrying an earlier failure", nil)
		if f = k.f.Load(); f == nil {
			return
		}
		k.retryIndices(*f)
	}
	k.collectDrops(*f)
}

// retryIndices adds again the receiver indices the filter failed to
// learn, those still in use, while it cannot be detached.
func (k *kernelFilter) retryIndices(f KernelFilter) {
	k.mu.Lock()
	defer k.mu.Unlock()
	for idx := range k.retry {
		if !k.live(idx) || f.AddIndex(idx) == nil {
			delete(k.retry, idx)
		}
	}
}

func (k *kernelFilter) collectDrops(f KernelFilter) {
	k.mu.Lock()
	defer k.mu.Unlock()
	c, err := f.Counts()
	if err != nil {
		return
	}
	for i, n := range c {
		if n > k.seen[i] {
			k.drops.Add(Outside, filterReasons[i], n-k.seen[i])
			k.seen[i] = n
		}
	}
}

// FilterAttached reports whether a kernel filter is in use.
func (r *Router) FilterAttached() bool { return r.filter.attached() }
