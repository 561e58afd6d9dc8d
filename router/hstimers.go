package router

import (
	"bytes"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// The handshake loop's timers (every TimerTick): retransmissions, session
// set-up and expiry, keepalives, drop summaries and the limiters' GC.

// timers retransmits and abandons handshakes, forgets dead sessions and
// logs drop summaries.
func (h *handshaker) timers(now time.Time) {
	h.r.health.timers.Store(h.r.mono.ns(now))
	h.expireKeys(now)
	st := h.r.state.Load()
	for _, p := range h.pending {
		if p.removed.Load() {
			h.dropPending(p)
		}
	}
	for _, p := range st.order {
		// A key changed: handshake with the new one now, rather than at
		// the next rekey or retransmission (keys.go).
		if p.keyChanged.Swap(false) || h.staleInitiation(p) {
			h.initiate(p, now, true)
		}
		if p.hs.pending != nil && now.Sub(p.hs.lastSent) >= p.hs.retryAfter {
			if now.Sub(p.hs.firstAttempt) >= RekeyAttemptTime {
				h.dropPending(p)
				p.hs.firstAttempt = time.Time{}
				n := p.queue.Clear()
				h.r.drops.Add(Inside, ReasonHandshakeTimeout, uint64(n))
				h.count.timedOut.Add(1)
				p.hsFailed.Add(1)
				h.reach.fail(p, "handshake gave up after "+RekeyAttemptTime.String(), nil, now)
				h.r.log.Debug("handshake gave up", "site", p.site, "gateway", p.name,
					"endpoint", p.Endpoint(), "after", RekeyAttemptTime, "dropped_packets", n)
			} else {
				h.initiate(p, now, true)
			}
		}
		h.liveness(p, now)
		h.expireSessions(p, now)
		h.reach.check(p, now)
	}
	h.reach.flush(h.r.log, st.order, now)
	h.r.filter.poll()
	h.logDrops(now)
	if h.r.mono.ns(now)-h.lastGC >= int64(limiterGCInterval) {
		h.lastGC = h.r.mono.ns(now)
		h.gate.gc(now)
		h.r.icmp.limit.GC()
	}
}

// liveness sets up sessions and sends keepalives.
//
//   - Every remote gateway gets a session without waiting for traffic,
//     so a site's flows can move to any of its gateways at once when one
//     goes down (see site.pick and prober.run).
//   - With a keepalive interval configured, an empty message goes out
//     whenever nothing else was sent for that long (NAT mappings stay
//     open).
//   - Without one, a peer that sends to us while we have sent it
//     nothing for KeepaliveTimeout gets a keepalive (at most one per
//     KeepaliveTimeout), so one-way traffic does not look like a dead
//     path to it.
//
// Whether the gateway is up is the liveness state machine's business
// (prober.run), not this function's.
func (h *handshaker) liveness(p *Peer, now time.Time) {
	kp := p.current.Load()
	ns := h.r.mono.ns(now)
	sent, recv := p.lastSend.Load(), p.lastReceive.Load()
	ka := p.keepalive.Load()
	scratch := h.scratch
	switch {
	case kp == nil || !usable(kp, now):
		if p.hs.noSession.IsZero() {
			p.hs.noSession = now
		}
		// Both ends set sessions up proactively; the end with the
		// lower key goes first, so a pair does not run two handshakes
		// at once (and a restart storm costs half the DH). The other
		// end steps in if nothing came for RekeyTimeout, or at once
		// while it has never reached the peer: the leader's first
		// initiation may have gone out before this gateway listened
		// (both starting together), and would be retried only after
		// RekeyTimeout.
		if p.hs.pending == nil && (h.leads(p) || !p.hs.reached || now.Sub(p.hs.noSession) >= RekeyTimeout) {
			h.initiate(p, now, false)
		}
	default:
		p.hs.noSession = time.Time{}
		// Rekey idle sessions too (probes keep them in use): a
		// failover must never find the session expired. Each peer
		// waits a little longer, by its rank, so sessions set up
		// together (a restart with hundreds of peers) are not all
		// renewed in the same second every two minutes.
		if p.hs.pending == nil && h.r.needsRekey(kp, now.Add(-h.idleRekeySpread(p))) {
			h.initiate(p, now, false)
		}
	}
	if kp != nil && usable(kp, now) {
		switch {
		case ka > 0 && ns-sent >= ka:
			h.sendKeepalive(p, kp, scratch)
		case ka == 0 && recv > sent && ns-sent >= int64(KeepaliveTimeout):
			h.sendKeepalive(p, kp, scratch)
		}
	}
}

// idleRekeySpread is how much later than the rekey age an idle session
// with p is renewed: up to an eighth of it (15 s of 2 minutes), spread by
// the peer's rank.
func (h *handshaker) idleRekeySpread(p *Peer) time.Duration {
	return time.Duration(p.rank.Load() % uint64(max(h.r.set.rekeyAfter/8, 1)))
}

// leads reports whether this gateway starts proactive handshakes with p:
// the one with the lower public key does.
func (h *handshaker) leads(p *Peer) bool {
	own, key := h.r.keys.Load().Current.Public, p.PublicKey()
	return h.r.state.Load().behindNAT || bytes.Compare(own[:], key[:]) < 0
}

// logDrops logs the drops since the last summary, at most once per
// DropLogInterval, so a flood of bad packets cannot flood the log.
func (h *handshaker) logDrops(now time.Time) {
	if h.r.mono.ns(now)-h.lastDropLg < int64(DropLogInterval) {
		return
	}
	h.lastDropLg = h.r.mono.ns(now)
	cur, prev := h.r.drops.snapshot(), h.lastDrops
	var attrs []any
	for d := range cur {
		for reason, n := range cur[d] {
			if Direction(d) == Inside && Reason(reason) == ReasonNotUnicast {
				continue // logged at debug below
			}
			if delta := n - prev[d][reason]; delta > 0 {
				attrs = append(attrs, Direction(d).String()+"."+Reason(reason).String(), delta)
			}
		}
	}
	h.lastDrops = cur
	var quiet []any
	if n := cur[Inside][ReasonNotUnicast] - prev[Inside][ReasonNotUnicast]; n > 0 {
		// The kernel's own link-scoped packets on the TUN (IPv6 MLD
		// reports and router solicitations when it comes up): counted,
		// never routed, nothing for an operator to fix.
		quiet = append(quiet, Inside.String()+"."+ReasonNotUnicast.String(), n)
	}
	if len(quiet) > 0 {
		h.r.log.Debug("link-local and multicast packets dropped", quiet...)
	}
	if len(attrs) > 0 {
		h.r.log.Warn("packets dropped", attrs...)
	}
}

// flushQueue seals and sends the packets queued for p and returns how many
// it sent.
func (h *handshaker) flushQueue(p *Peer, kp *bhcrypto.Keypair, scratch []byte) int {
	sent := 0
	batch := [][]byte{nil}
	p.queue.Drain(func(pkt []byte) {
		n := copy(scratch[bufHeadroom:], pkt)
		padded := bhcrypto.PaddedLen(n, h.r.set.mtu)
		clear(scratch[bufHeadroom+n : bufHeadroom+padded])
		msg, err := kp.Seal(scratch, padded)
		if err != nil {
			h.r.drops.Add(Inside, ReasonExpired, 1)
			return
		}
		batch[0] = msg
		if err := h.r.bind.Send(batch, p.Endpoint()); err != nil {
			h.r.drops.Add(Inside, ReasonSendError, 1)
			return
		}
		p.txPackets.Add(1)
		p.txBytes.Add(uint64(n))
		ns := h.r.mono.ns(h.r.clock.Now())
		p.lastSend.Store(ns)
		sent++
	})
	return sent
}

// sendKeepalive sends an empty transport message.
func (h *handshaker) sendKeepalive(p *Peer, kp *bhcrypto.Keypair, scratch []byte) {
	msg, err := kp.Seal(scratch, 0)
	if err != nil {
		return
	}
	if err := h.r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		h.r.log.Debug("keepalive send failed", "site", p.site, "gateway", p.name, "err", err)
		return
	}
	p.lastSend.Store(h.r.mono.ns(h.r.clock.Now()))
}

// expireSessions forgets p's sessions that are too old to keep. Called by
// the handshake loop's timers.
func (h *handshaker) expireSessions(p *Peer, now time.Time) {
	gone := p.keypairs.expire(now)
	h.r.retire(gone[:]...)
}
