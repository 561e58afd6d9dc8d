package router

import (
	"log/slog"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/bridgehead/bridgehead/ratelimit"
)

// A source address that sends handshake messages with a bad mac1 faster
// than BadMACRate per second (after a burst of BadMACBurst) is blocked in
// the kernel filter for BlockBadMACFor: its initiations and responses are
// then dropped before they reach the socket, and counted as rate_limited.
// An honest gateway never sends a bad mac1 (one with the wrong key for us
// sends one per retransmission, every 5 s). The address of any configured
// or current peer endpoint is never blocked, whatever the port, since a
// spoofed flood could otherwise cut that peer off. At most
// maxBlocksPerSecond new blocks are made per second and maxBlocked are
// remembered. This helps only against floods from real source addresses:
// one with a new spoofed source per datagram never exceeds any source's
// rate and still reaches the mac1 check in userspace.
const (
	BadMACRate     = 20
	BadMACBurst    = 100
	BlockBadMACFor = 10 * time.Second

	maxBlocked         = 4096
	maxBlocksPerSecond = 10
	blockLogInterval   = time.Second
)

// sourceBlocker blocks sources that send bad mac1s in the kernel filter
// (see BadMACRate). The outside loop calls note, the handshake loop gc;
// mu guards the fields after it. It reads the published routing state
// (state) to spare peers' addresses and blocks through filter.
type sourceBlocker struct {
	filter *kernelFilter
	state  *atomic.Pointer[routingState]
	now    func() time.Time
	log    *slog.Logger
	badMAC *ratelimit.Limiter // bad mac1s per source

	mu       sync.Mutex
	budget   *ratelimit.Limiter // new blocks per second, one bucket
	until    map[netip.Addr]time.Time
	lastLog  time.Time
	unlogged int // blocks since the last log line
}

func newSourceBlocker(filter *kernelFilter, state *atomic.Pointer[routingState], now func() time.Time, log *slog.Logger) *sourceBlocker {
	return &sourceBlocker{
		filter: filter, state: state, now: now, log: log,
		badMAC: ratelimit.New(BadMACRate, BadMACBurst, 4096, now),
		budget: ratelimit.New(maxBlocksPerSecond, maxBlocksPerSecond, 1, now),
		until:  make(map[netip.Addr]time.Time),
	}
}

// note counts a bad-mac1 message from from and blocks its address in the
// kernel filter once that address is over the rate. Called by the
// outside loop.
func (b *sourceBlocker) note(from netip.AddrPort) {
	if !b.filter.attached() || b.badMAC.Take(from.Addr()) != ratelimit.Limited {
		return
	}
	a := from.Addr().Unmap()
	now := b.now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if until, ok := b.until[a]; ok && now.Before(until) {
		return // blocked; this one was already on its way
	}
	if len(b.until) >= maxBlocked || b.isPeerAddr(a) || !b.budget.Allow(netip.IPv4Unspecified()) {
		return
	}
	if !b.filter.block(a, BlockBadMACFor) {
		return
	}
	b.until[a] = now.Add(BlockBadMACFor)
	b.unlogged++
	if now.Sub(b.lastLog) >= blockLogInterval {
		b.log.Warn("blocking handshake messages from sources sending bad MACs",
			"source", a, "sources_blocked_since_last_log", b.unlogged,
			"for", BlockBadMACFor, "rate_above", BadMACRate)
		b.lastLog, b.unlogged = now, 0
	}
}

// isPeerAddr reports whether a is the address of a configured or current
// endpoint of any peer.
func (b *sourceBlocker) isPeerAddr(a netip.Addr) bool {
	st := b.state.Load()
	for ep := range st.byEndpoint {
		if ep.Addr().Unmap() == a {
			return true
		}
	}
	for _, p := range st.order {
		if p.Endpoint().Addr().Unmap() == a {
			return true
		}
	}
	return false
}

// gc lets idle sources leave the rate limiter and forgets expired
// blocks. Called by the handshake loop with the other limiters' GC.
func (b *sourceBlocker) gc(now time.Time) {
	b.badMAC.GC()
	b.mu.Lock()
	defer b.mu.Unlock()
	for a, until := range b.until {
		if !now.Before(until) {
			delete(b.until, a)
		}
	}
}
