package probestate

import "sync/atomic"

// Path MTU probing. Probes are 16 bytes, so a path that drops only large
// datagrams (an MTU change on the WAN, a tunnel in the path) would never
// mark a gateway down while every full-size packet to it is lost. Now and
// then each gateway that is up gets a probe padded to the tunnel's full
// size (the largest inner packet, as data is sealed), sent together with
// a small one:
//
//   - answered: the path carries full-size packets; the gateway is whole.
//   - unanswered while the small probe's answer came back, MTUTries
//     times in a row: the gateway is "up, MTU-degraded". It keeps no
//     flows while a whole gateway of its site is up (the router's site.pick
//     ranks it below them; a flow never splits over gateways by packet size), and
//     a binary search over padded sizes finds the largest that passes,
//     reported as its path MTU (status, bridgehead_peer_path_mtu_bytes).
//   - neither answered: the path is silent, which the router's liveness
//     handles; the
//     probe is sent again without a verdict.
//
// A degraded gateway is checked again at full size every interval and is
// whole as soon as one passes. Each probe's echo carries MTUEcho, so the
// outside loop can tell an MTU probe's answer from a small probe's.
const (
	// MTUTries full-size probes in a row must go unanswered, each
	// while its small companion was answered, to mark a gateway
	// MTU-degraded: one lost datagram is not a black hole.
	MTUTries = 3
	// MTUEcho marks the echo of an MTU probe (bit 62: monotonic
	// nanoseconds never reach it, and the echo stays a positive int64).
	MTUEcho = 1 << 62
)

type phase uint8

const (
	idle   phase = iota // nothing in flight; next check an interval after checked
	check               // a full-size probe in flight
	search              // binary search between lo (passes) and hi (fails)
)

// Sizes are the probe plaintext sizes a PathMTU works with: Small is the
// smallest probe (the floor of the search), Full the tunnel's full size
// (the largest inner packet, as data is sealed), Step the padding
// multiple the search moves in (sizes within one step seal alike).
type Sizes struct{ Small, Full, Step int }

// PathMTU is one gateway's path MTU state; the zero PathMTU is ready.
// Answer is called by the outside loop; MTU, Degraded and Answered by
// any goroutine (Degraded per packet, by the router's site.pick); Step,
// Sent and Pause by the handshake loop alone, which owns the rest.
type PathMTU struct {
	answered atomic.Int64 // send time (mono ns) of the newest answered MTU probe
	mtu      atomic.Int64 // largest probe plaintext known to pass; 0: not yet checked
	degraded atomic.Bool  // full-size probes fail while small ones pass

	phase   phase
	checked int64 // mono ns of the last verdict; the next full-size check is due an interval later
	pending int   // plaintext size of the probe in flight; 0: none
	sentAt  int64 // when it was sent
	tries   int   // full-size probes unanswered in a row
	lo, hi  int   // search bounds
}

// Step moves the prober to mono and returns the plaintext size of an MTU
// probe to send now (0: none) and whether Degraded changed. acked is the gateway's newest evidence that our
// packets reach it (the router's liveness); a probe unanswered after timeout
// failed only if something newer than it was answered. interval is the
// time between full-size checks, counted from the last verdict with the
// interval of now (traffic starting shortens it at once). The caller
// sends the probe with a small one and calls Sent. Handshake loop only.
func (m *PathMTU) Step(mono int64, sz Sizes, acked, timeout, interval int64) (size int, changed bool) {
	was := m.degraded.Load()
	if m.pending != 0 {
		switch {
		case m.answered.Load() == m.sentAt:
			m.pass(m.pending, sz.Full, mono)
		case mono-m.sentAt < timeout:
			return 0, false // still waiting
		case acked > m.sentAt:
			m.fail(m.pending, sz)
		}
		// Otherwise nothing came back at all: no verdict, same size again.
		m.pending = 0
	}
	switch m.phase {
	case idle:
		if m.checked == 0 {
			m.checked = mono // first seen up: the first check is an interval away
		}
		if mono-m.checked >= interval {
			m.phase, m.tries = check, 0
			size = sz.Full
		}
	case check:
		size = sz.Full
	case search:
		size = m.searchSize(sz, mono)
	}
	return size, m.degraded.Load() != was
}

// Sent records that the probe Step asked for went out at mono and
// returns its echo.
func (m *PathMTU) Sent(size int, mono int64) uint64 {
	m.pending, m.sentAt = size, mono
	return uint64(mono) | MTUEcho
}

// Pause drops the probe in flight without a verdict: the gateway is not
// up, and a probe lost with everything else says nothing about its size.
func (m *PathMTU) Pause() {
	m.pending = 0
	if m.phase == check {
		m.phase = idle // checked again once it is up
	}
}

func (m *PathMTU) pass(size, full int, mono int64) {
	switch m.phase {
	case check:
		m.mtu.Store(int64(full))
		m.degraded.Store(false)
		m.phase, m.checked = idle, mono
	case search:
		m.lo = max(m.lo, size)
	}
}

func (m *PathMTU) fail(size int, sz Sizes) {
	switch m.phase {
	case check:
		if m.tries++; m.tries < MTUTries {
			return
		}
		m.degraded.Store(true)
		m.phase, m.lo, m.hi = search, sz.Small, sz.Full
	case search:
		m.hi = min(m.hi, size)
	}
}

// searchSize is the next size of the search, or 0 when it is done (the
// result is stored and the next full-size check scheduled).
func (m *PathMTU) searchSize(sz Sizes, mono int64) int {
	step := sz.Step
	if m.hi-m.lo <= step {
		m.mtu.Store(int64(m.lo))
		m.phase, m.checked = idle, mono
		return 0
	}
	mid := (m.lo + m.hi) / 2 / step * step
	if mid <= m.lo {
		mid = m.lo + step
	}
	return min(mid, sz.Full)
}

// Answer books the answer to the MTU probe whose echo (MTUEcho set) came
// back; Step reads it. Outside loop.
func (m *PathMTU) Answer(echo uint64) { m.answered.Store(SentAt(echo)) }

// Answered is the send time (mono ns) of the newest answered MTU probe.
// Any goroutine.
func (m *PathMTU) Answered() int64 { return m.answered.Load() }

// MTU is the largest probe plaintext known to pass, 0 before the first
// check. Any goroutine.
func (m *PathMTU) MTU() int { return int(m.mtu.Load()) }

// Degraded reports whether full-size probes fail while small ones pass.
// Any goroutine; it allocates nothing.
func (m *PathMTU) Degraded() bool { return m.degraded.Load() }
