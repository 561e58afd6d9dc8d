package router

import (
	"sync/atomic"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Path MTU probing. Probes are 16 bytes, so a path that drops only large
// datagrams (an MTU change on the WAN, a tunnel in the path) would never
// mark a gateway down while every full-size packet to it is lost. Now and
// then each gateway that is up gets a probe padded to the tunnel's full
// size (the largest inner packet, as data is sealed), sent together with
// a small one:
//
//   - answered: the path carries full-size packets; the gateway is whole.
//   - unanswered while the small probe's answer came back, mtuProbeTries
//     times in a row: the gateway is "up, MTU-degraded". It keeps no
//     flows while a whole gateway of its site is up (site.pick ranks it
//     below them; a flow never splits over gateways by packet size), and
//     a binary search over padded sizes finds the largest that passes,
//     reported as its path MTU (status, bridgehead_peer_path_mtu_bytes).
//   - neither answered: the path is silent, which liveness handles; the
//     probe is sent again without a verdict.
//
// A degraded gateway is checked again at full size every interval and is
// whole as soon as one passes. Each probe's echo carries mtuEcho, so the
// outside loop can tell an MTU probe's answer from a small probe's.
const (
	// MTUProbeFactor: the path to a gateway that carries our traffic is
	// checked at full size every MTUProbeFactor probe intervals
	// (MTUProbeInterval at the default interval), the first time that
	// long after it came up; idle gateways are checked MTUIdleFactor
	// times less often.
	MTUProbeFactor   = 50
	MTUProbeInterval = MTUProbeFactor * DefaultProbeInterval
	MTUIdleFactor    = 6
	// mtuProbeTries full-size probes in a row must go unanswered, each
	// while its small companion was answered, to mark a gateway
	// MTU-degraded: one lost datagram is not a black hole.
	mtuProbeTries = 3
	// mtuEcho marks the echo of an MTU probe (bit 62: monotonic
	// nanoseconds never reach it, and the echo stays a positive int64).
	mtuEcho = 1 << 62
)

type mtuPhase uint8

const (
	mtuIdle   mtuPhase = iota // nothing in flight; next check an interval after checked
	mtuCheck                  // a full-size probe in flight
	mtuSearch                 // binary search between lo (passes) and hi (fails)
)

// pathMTU is one gateway's path MTU state. answered is written by the
// outside loop, mtu and degraded by the handshake loop and read by any
// goroutine (degraded per packet, by site.pick); the rest belongs to the
// handshake loop.
type pathMTU struct {
	answered atomic.Int64 // send time (mono ns) of the newest answered MTU probe
	mtu      atomic.Int64 // largest probe plaintext known to pass; 0: not yet checked
	degraded atomic.Bool  // full-size probes fail while small ones pass

	phase   mtuPhase
	checked int64 // mono ns of the last verdict; the next full-size check is due an interval later
	pending int   // plaintext size of the probe in flight; 0: none
	sentAt  int64 // when it was sent
	tries   int   // full-size probes unanswered in a row
	lo, hi  int   // search bounds
}

// step moves the prober to mono and returns the plaintext size of an MTU
// probe to send now (0: none) and whether degraded changed. full is the
// tunnel's full size; acked is the gateway's newest evidence that our
// packets reach it (see liveness); a probe unanswered after timeout
// failed only if something newer than it was answered. interval is the
// time between full-size checks, counted from the last verdict with the
// interval of now (traffic starting shortens it at once). The caller
// sends the probe with a small one and calls sent. Handshake loop only.
func (m *pathMTU) step(mono int64, full int, acked, timeout, interval int64) (size int, changed bool) {
	was := m.degraded.Load()
	if m.pending != 0 {
		switch {
		case m.answered.Load() == m.sentAt:
			m.pass(m.pending, full, mono)
		case mono-m.sentAt < timeout:
			return 0, false // still waiting
		case acked > m.sentAt:
			m.fail(m.pending, full)
		}
		// Otherwise nothing came back at all: no verdict, same size again.
		m.pending = 0
	}
	switch m.phase {
	case mtuIdle:
		if m.checked == 0 {
			m.checked = mono // first seen up: the first check is an interval away
		}
		if mono-m.checked >= interval {
			m.phase, m.tries = mtuCheck, 0
			size = full
		}
	case mtuCheck:
		size = full
	case mtuSearch:
		size = m.searchSize(full, mono)
	}
	return size, m.degraded.Load() != was
}

// sent records that the probe step asked for went out at mono and
// returns its echo.
func (m *pathMTU) sent(size int, mono int64) uint64 {
	m.pending, m.sentAt = size, mono
	return uint64(mono) | mtuEcho
}

// pause drops the probe in flight without a verdict: the gateway is not
// up, and a probe lost with everything else says nothing about its size.
func (m *pathMTU) pause() {
	m.pending = 0
	if m.phase == mtuCheck {
		m.phase = mtuIdle // checked again once it is up
	}
}

func (m *pathMTU) pass(size, full int, mono int64) {
	switch m.phase {
	case mtuCheck:
		m.mtu.Store(int64(full))
		m.degraded.Store(false)
		m.phase, m.checked = mtuIdle, mono
	case mtuSearch:
		m.lo = max(m.lo, size)
	}
}

func (m *pathMTU) fail(size, full int) {
	switch m.phase {
	case mtuCheck:
		if m.tries++; m.tries < mtuProbeTries {
			return
		}
		m.degraded.Store(true)
		m.phase, m.lo, m.hi = mtuSearch, probeLen, full
	case mtuSearch:
		m.hi = min(m.hi, size)
	}
}

// searchSize is the next size of the search, or 0 when it is done (the
// result is stored and the next full-size check scheduled).
func (m *pathMTU) searchSize(full int, mono int64) int {
	const step = bhcrypto.PaddingMultiple
	if m.hi-m.lo <= step {
		m.mtu.Store(int64(m.lo))
		m.phase, m.checked = mtuIdle, mono
		return 0
	}
	mid := (m.lo + m.hi) / 2 / step * step
	if mid <= m.lo {
		mid = m.lo + step
	}
	return min(mid, full)
}
