package router

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// hsMessage is a handshake datagram waiting for the handshake loop. The
// outside loop copies into preallocated messages from a free list so a
// flood of handshakes cannot make it allocate or block.
type hsMessage struct {
	buf  []byte
	n    int
	from netip.AddrPort
}

// queueHandshake hands a handshake message to the handshake loop, or drops
// it when the loop is behind. Sizes and mac1 are checked here, before any
// copy, without allocating: it runs in the outside loop, which a flood
// of handshake-shaped garbage must not slow down or grow.
func (r *Router) queueHandshake(msg []byte, from netip.AddrPort) {
	want := bhcrypto.InitiationSize
	switch msg[0] {
	case bhcrypto.MsgResponse:
		want = bhcrypto.ResponseSize
	case bhcrypto.MsgCookieReply:
		want = bhcrypto.CookieReplySize
	}
	if len(msg) != want {
		r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	// mac1 needs only our public key: whoever lacks it is dropped here,
	// before taking a queue slot, and never costs Diffie-Hellman.
	if msg[0] != bhcrypto.MsgCookieReply && !r.mac1.Check(msg) {
		r.drops.Add(Outside, ReasonBadMAC, 1)
		r.noteBadMAC(from)
		return
	}
	var m *hsMessage
	select {
	case m = <-r.hsFree:
	default:
		r.drops.Add(Outside, ReasonHandshakeBusy, 1)
		return
	}
	m.n = copy(m.buf, msg)
	m.from = from
	r.hsQueue <- m // never blocks: hsQueue holds every message of hsFree
}

// handshakeLoop owns all handshake state. It answers and completes
// handshakes, retransmits, gives up, and flushes queued packets.
func (r *Router) handshakeLoop(ctx context.Context) error {
	// One ticker drives the probes (every st.probeTick, a quarter of the
	// shortest probe interval) and, every TimerTick, the slower session
	// timers.
	period := r.state.Load().probeTick
	tick, stop := r.clock.Ticker(period)
	defer func() { stop() }()
	scratch := make([]byte, r.bufSize)
	var lastTimers time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-r.hsQueue:
			r.handleHandshake(m.buf[:m.n], m.from, r.clock.Now(), scratch)
			r.hsFree <- m
		case p := <-r.trigger:
			r.handshakes.triggers.Add(1)
			p.wantHandshake.Store(false)
			r.onTrigger(p, r.clock.Now(), scratch)
		case now := <-tick:
			if now.Sub(lastTimers) >= TimerTick {
				lastTimers = now
				r.timers(now)
			}
			st := r.state.Load()
			r.probeTimers(st, now)
			if st.probeTick != period {
				stop()
				period = st.probeTick
				tick, stop = r.clock.Ticker(period)
			}
		}
	}
}

func (r *Router) handleHandshake(msg []byte, from netip.AddrPort, now time.Time, scratch []byte) {
	if msg[0] == bhcrypto.MsgCookieReply {
		r.handleCookieReply(msg)
		return
	}
	// Under load, make senders prove they receive at their address
	// before doing any Diffie-Hellman for them, and bound each source.
	// A configured peer endpoint that proved it is never refused: the
	// per-peer initiation interval bounds it instead. A response to an
	// initiation of ours that is still pending is not held back: it is
	// what we asked for, its receiver index is a random 32-bit value
	// only the peer (or someone on the path) has seen, and a pending
	// index is answered at most once, so it cannot be replayed for work.
	if r.underLoad(now) && !r.answersPending(msg) {
		if !r.cookies.CheckMAC2(msg, from) {
			r.drops.Add(Outside, ReasonCookieRequired, 1)
			if reply, err := r.cookies.CreateReply(msg, from); err == nil {
				r.handshakes.cookieReplies.Add(1)
				r.bind.Send([][]byte{reply}, from)
			}
			return
		}
		if r.state.Load().byEndpoint[from] == nil && !r.limiter.Allow(from.Addr()) {
			r.drops.Add(Outside, ReasonRateLimited, 1)
			return
		}
	}
	r.handshakes.dh.Add(1)
	switch msg[0] {
	case bhcrypto.MsgInitiation:
		r.handleInitiation(msg, from, now)
	case bhcrypto.MsgResponse:
		r.handleResponse(msg, from, now, scratch)
	}
}

// underLoad reports whether the handshake loop is under load at now: its
// queue is past an eighth full, or was within UnderLoadHoldover.
func (r *Router) underLoad(now time.Time) bool {
	if len(r.hsQueue) >= cap(r.hsQueue)/8 {
		r.lastLoaded = now
		return true
	}
	return !r.lastLoaded.IsZero() && now.Sub(r.lastLoaded) < UnderLoadHoldover
}

// answersPending reports whether msg is a response to one of our pending
// initiations (by receiver index alone; ConsumeResponse authenticates it).
func (r *Router) answersPending(msg []byte) bool {
	if msg[0] != bhcrypto.MsgResponse {
		return false
	}
	idx, ok := bhcrypto.ResponseReceiverIndex(msg)
	return ok && r.pending[idx] != nil
}

// handshakeDrop maps a handshake error to a drop reason.
func handshakeDrop(err error) Reason {
	switch {
	case errors.Is(err, bhcrypto.ErrMAC1):
		return ReasonBadMAC
	case errors.Is(err, bhcrypto.ErrMessageSize):
		return ReasonBadSize
	case errors.Is(err, bhcrypto.ErrMessageType):
		return ReasonUnknownType
	default:
		return ReasonHandshakeFailed
	}
}

func (r *Router) handleInitiation(msg []byte, from netip.AddrPort, now time.Time) {
	ri, err := r.id.ConsumeInitiation(msg)
	if err != nil {
		r.drops.Add(Outside, handshakeDrop(err), 1)
		return
	}
	st := r.state.Load()
	p := st.peers[ri.PeerStatic]
	if p == nil {
		r.drops.Add(Outside, ReasonUnknownPeer, 1)
		r.log.Debug("handshake from unknown key", "from", from)
		return
	}
	// A replayed initiation must not replace a live session.
	if !ri.Timestamp.After(p.hs.lastTimestamp) {
		r.drops.Add(Outside, ReasonStaleHandshake, 1)
		return
	}
	// An honest peer initiates at most every RekeyTimeout; faster is a
	// flood (of fresh initiations by a peer, or a replay of a stolen key).
	if !p.hs.lastInitiation.IsZero() && now.Sub(p.hs.lastInitiation) < InitiationInterval {
		r.drops.Add(Outside, ReasonRateLimited, 1)
		return
	}
	idx, err := r.newIndex()
	if err != nil {
		r.log.Error("cannot allocate receiver index", "err", err)
		return
	}
	kp, resp, err := r.id.CreateResponse(ri, idx, now)
	if err != nil {
		r.drops.Add(Outside, ReasonHandshakeFailed, 1)
		return
	}
	p.hs.lastTimestamp = ri.Timestamp
	p.hs.lastInitiation = now
	p.jar.AddMAC2(resp)
	p.jar.Sent(resp)
	if !r.install(p, kp, p.keypairs.answer) {
		r.drops.Add(Outside, ReasonUnknownPeer, 1) // removed since we looked it up
		return
	}
	ep := from
	p.endpoint.Store(&ep)
	p.lastReceive.Store(r.mono.ns(now))
	r.handshakes.answered.Add(1)
	p.hsAnswered.Add(1)
	if err := r.bind.Send([][]byte{resp}, from); err != nil {
		p.hsSendFailed.Add(1)
		r.reach.fail(p, "sending handshake response", err, now)
	}
}

func (r *Router) handleResponse(msg []byte, from netip.AddrPort, now time.Time, scratch []byte) {
	idx, ok := bhcrypto.ResponseReceiverIndex(msg)
	if !ok {
		r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	p := r.pending[idx]
	if p == nil || p.hs.pending == nil || p.hs.pendingIndex != idx {
		r.drops.Add(Outside, ReasonUnknownIndex, 1)
		return
	}
	if p.removed.Load() {
		// Removed by a reload since we initiated: the key may be
		// revoked. establish refuses too, should the reload come
		// later than this check.
		r.dropPending(p)
		r.drops.Add(Outside, ReasonUnknownPeer, 1)
		return
	}
	kp, err := p.hs.pending.ConsumeResponse(msg, now)
	if err != nil {
		r.drops.Add(Outside, handshakeDrop(err), 1)
		p.hsFailed.Add(1)
		return
	}
	delete(r.pending, idx)
	p.hs.pending = nil
	p.handshaking.Store(false)
	p.hs.firstAttempt = time.Time{}
	old := p.current.Load()
	first := old == nil || !usable(old, now)
	if !r.establish(p, kp) {
		r.drops.Add(Outside, ReasonUnknownPeer, 1) // removed by a reload
		return
	}
	ep := from
	p.endpoint.Store(&ep)
	p.lastHandshake.Store(r.mono.ns(now))
	p.lastReceive.Store(r.mono.ns(now))
	p.live.acked.Store(r.mono.ns(now)) // our initiation reached it
	r.handshakes.completed.Add(1)
	p.hsCompleted.Add(1)
	r.log.Debug("session established", "site", p.site, "gateway", p.name, "endpoint", from)
	r.reach.reached(p, first)
	// The responder uses the session only once it sees us use it: send
	// the queued packets, or a keepalive when there are none.
	if r.flushQueue(p, kp, scratch) == 0 {
		r.sendKeepalive(p, kp, scratch)
	}
}

// handleCookieReply stores a cookie a loaded peer sent in answer to our
// initiation; the next retransmission carries mac2 made with it.
func (r *Router) handleCookieReply(msg []byte) {
	idx, ok := bhcrypto.CookieReplyReceiverIndex(msg)
	if !ok {
		r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	p := r.pending[idx]
	if p == nil {
		// A reply to a response we sent: find the peer by session.
		if e, ok := r.index.lookup(idx); ok {
			p = e.peer
		}
	}
	if p == nil {
		r.drops.Add(Outside, ReasonUnknownIndex, 1)
		return
	}
	if err := p.jar.ConsumeReply(msg); err != nil {
		r.drops.Add(Outside, ReasonBadCookie, 1)
		return
	}
	r.log.Debug("peer is under load and sent a cookie", "site", p.site, "gateway", p.name)
}

// onTrigger runs when the data path found no usable session for p, or one
// due for rekeying, or packets queued behind a freshly confirmed session.
func (r *Router) onTrigger(p *Peer, now time.Time, scratch []byte) {
	if p.removed.Load() {
		p.queue.clear()
		return
	}
	kp := p.current.Load()
	if kp != nil && usable(kp, now) {
		r.flushQueue(p, kp, scratch)
		if !r.needsRekey(kp, now) {
			return
		}
	}
	r.initiate(p, now, false)
}

// initiate sends a handshake initiation to p unless one is in flight.
// retransmit forces a new attempt for a pending handshake.
//
// New attempts (not retransmits) are paced to InitiationRate: after a
// restart with hundreds of peers, initiating to all of them at once would
// bring their responses back faster than the loop answers them, tip it
// "under load" and cost every peer a cookie round and a RekeyTimeout.
// An attempt the pace holds back is made again by the caller's next run
// (the timers, or the next packet that wants a session).
func (r *Router) initiate(p *Peer, now time.Time, retransmit bool) {
	if p.hs.pending != nil && !retransmit {
		return
	}
	if !retransmit && !r.initPace.Allow(netip.IPv4Unspecified()) {
		return
	}
	if p.hs.firstAttempt.IsZero() {
		p.hs.firstAttempt = now
	}
	if p.hs.pending != nil {
		r.dropPending(p)
	}
	idx, err := r.newIndex()
	if err != nil {
		r.log.Error("cannot allocate receiver index", "err", err)
		return
	}
	in, msg, err := r.id.CreateInitiation(p.key, idx, now)
	if err != nil {
		r.log.Error("cannot create handshake initiation", "site", p.site, "gateway", p.name, "err", err)
		return
	}
	p.jar.AddMAC2(msg)
	p.jar.Sent(msg)
	p.hs.pending = in
	p.handshaking.Store(true)
	p.hs.pendingIndex = idx
	p.hs.lastSent = now
	p.hs.retryAfter = RekeyTimeout + r.jitter()
	r.pending[idx] = p
	r.handshakes.initiated.Add(1)
	p.hsInitiated.Add(1)
	if err := r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		p.hsSendFailed.Add(1)
		r.reach.fail(p, "sending handshake initiation", err, now)
	}
}

// dropPending abandons p's pending initiation, zeroing its ephemeral key.
func (r *Router) dropPending(p *Peer) {
	delete(r.pending, p.hs.pendingIndex)
	p.hs.pending.Abandon()
	p.hs.pending = nil
	p.handshaking.Store(false)
}

// jitter returns a random delay in [0, RekeyJitter).
func (r *Router) jitter() time.Duration {
	var b [8]byte
	if _, err := io.ReadFull(r.rand, b[:]); err != nil {
		return 0
	}
	return time.Duration(binary.LittleEndian.Uint64(b[:]) % uint64(RekeyJitter))
}

// timers retransmits and abandons handshakes, forgets dead sessions and
// logs drop summaries.
func (r *Router) timers(now time.Time) {
	r.timersRan.Store(r.mono.ns(now))
	st := r.state.Load()
	for _, p := range r.pending {
		if p.removed.Load() {
			r.dropPending(p)
		}
	}
	for _, p := range st.order {
		if p.hs.pending != nil && now.Sub(p.hs.lastSent) >= p.hs.retryAfter {
			if now.Sub(p.hs.firstAttempt) >= RekeyAttemptTime {
				r.dropPending(p)
				p.hs.firstAttempt = time.Time{}
				n := p.queue.clear()
				r.drops.Add(Inside, ReasonHandshakeTimeout, uint64(n))
				r.handshakes.timedOut.Add(1)
				p.hsFailed.Add(1)
				r.reach.fail(p, "handshake gave up after "+RekeyAttemptTime.String(), nil, now)
				r.log.Debug("handshake gave up", "site", p.site, "gateway", p.name,
					"endpoint", p.Endpoint(), "after", RekeyAttemptTime, "dropped_packets", n)
			} else {
				r.initiate(p, now, true)
			}
		}
		r.liveness(p, now)
		r.expireSessions(p, now)
		r.reach.check(p, now)
	}
	r.reach.flush(r.log, st.order, now)
	r.pollFilter()
	r.logDrops(now)
	if r.mono.ns(now)-r.lastGC >= int64(limiterGCInterval) {
		r.lastGC = r.mono.ns(now)
		r.limiter.GC()
		r.icmpLimit.GC()
		r.badMAC.GC()
		r.forgetBlocks(now)
	}
}

// liveness sets up sessions and sends keepalives.
//
//   - Every remote gateway gets a session without waiting for traffic,
//     so a site's flows can move to any of its gateways at once when one
//     goes down (see site.pick and probeTimers).
//   - With a keepalive interval configured, an empty message goes out
//     whenever nothing else was sent for that long (NAT mappings stay
//     open).
//   - Without one, a peer that sends to us while we have sent it
//     nothing for KeepaliveTimeout gets a keepalive (at most one per
//     KeepaliveTimeout), so one-way traffic does not look like a dead
//     path to it.
//
// Whether the gateway is up is the liveness state machine's business
// (probeTimers), not this function's.
func (r *Router) liveness(p *Peer, now time.Time) {
	kp := p.current.Load()
	ns := r.mono.ns(now)
	sent, recv := p.lastSend.Load(), p.lastReceive.Load()
	ka := p.keepalive.Load()
	scratch := r.keepaliveScratch
	switch {
	case kp == nil || !usable(kp, now):
		if p.hs.noSession.IsZero() {
			p.hs.noSession = now
		}
		// Both ends set sessions up proactively; the end with the
		// lower key goes first, so a pair does not run two handshakes
		// at once (and a restart storm costs half the DH). The other
		// end steps in if nothing came for RekeyTimeout.
		if p.hs.pending == nil && (r.leads(p) || now.Sub(p.hs.noSession) >= RekeyTimeout) {
			r.initiate(p, now, false)
		}
	default:
		p.hs.noSession = time.Time{}
		// Rekey idle sessions too (probes keep them in use): a
		// failover must never find the session expired. Each peer
		// waits a little longer, by its rank, so sessions set up
		// together (a restart with hundreds of peers) are not all
		// renewed in the same second every two minutes.
		if p.hs.pending == nil && r.needsRekey(kp, now.Add(-r.idleRekeySpread(p))) {
			r.initiate(p, now, false)
		}
	}
	if kp != nil && usable(kp, now) {
		switch {
		case ka > 0 && ns-sent >= ka:
			r.sendKeepalive(p, kp, scratch)
		case ka == 0 && recv > sent && ns-sent >= int64(KeepaliveTimeout):
			r.sendKeepalive(p, kp, scratch)
		}
	}
}

// idleRekeySpread is how much later than the rekey age an idle session
// with p is renewed: up to an eighth of it (15 s of 2 minutes), spread by
// the peer's rank.
func (r *Router) idleRekeySpread(p *Peer) time.Duration {
	return time.Duration(p.rank % uint64(max(r.rekeyAfter/8, 1)))
}

// leads reports whether this gateway starts proactive handshakes with p:
// the one with the lower public key does.
func (r *Router) leads(p *Peer) bool {
	return bytes.Compare(r.id.Public[:], p.key[:]) < 0
}

// logDrops logs the drops since the last summary, at most once per
// DropLogInterval, so a flood of bad packets cannot flood the log.
func (r *Router) logDrops(now time.Time) {
	if r.mono.ns(now)-r.lastDropLg < int64(DropLogInterval) {
		return
	}
	r.lastDropLg = r.mono.ns(now)
	cur, prev := r.drops.snapshot(), r.lastDrops
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
	r.lastDrops = cur
	var quiet []any
	if n := cur[Inside][ReasonNotUnicast] - prev[Inside][ReasonNotUnicast]; n > 0 {
		// The kernel's own link-scoped packets on the TUN (IPv6 MLD
		// reports and router solicitations when it comes up): counted,
		// never routed, nothing for an operator to fix.
		quiet = append(quiet, Inside.String()+"."+ReasonNotUnicast.String(), n)
	}
	if len(quiet) > 0 {
		r.log.Debug("link-local and multicast packets dropped", quiet...)
	}
	if len(attrs) > 0 {
		r.log.Warn("packets dropped", attrs...)
	}
}

// flushQueue seals and sends the packets queued for p and returns how many
// it sent.
func (r *Router) flushQueue(p *Peer, kp *bhcrypto.Keypair, scratch []byte) int {
	sent := 0
	batch := [][]byte{nil}
	p.queue.drain(func(pkt []byte) {
		n := copy(scratch[bufHeadroom:], pkt)
		padded := bhcrypto.PaddedLen(n, r.mtu)
		clear(scratch[bufHeadroom+n : bufHeadroom+padded])
		msg, err := kp.Seal(scratch, padded)
		if err != nil {
			r.drops.Add(Inside, ReasonExpired, 1)
			return
		}
		batch[0] = msg
		if err := r.bind.Send(batch, p.Endpoint()); err != nil {
			r.drops.Add(Inside, ReasonSendError, 1)
			return
		}
		p.txPackets.Add(1)
		p.txBytes.Add(uint64(n))
		ns := r.mono.ns(r.clock.Now())
		p.lastSend.Store(ns)
		sent++
	})
	return sent
}

// sendKeepalive sends an empty transport message.
func (r *Router) sendKeepalive(p *Peer, kp *bhcrypto.Keypair, scratch []byte) {
	msg, err := kp.Seal(scratch, 0)
	if err != nil {
		return
	}
	if err := r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		r.log.Debug("keepalive send failed", "site", p.site, "gateway", p.name, "err", err)
		return
	}
	p.lastSend.Store(r.mono.ns(r.clock.Now()))
}

// establish installs kp, a handshake we initiated and completed, as p's
// current session (see keypairs), and reports whether it did: a peer
// removed meanwhile gets nothing. Called by the handshake loop.
func (r *Router) establish(p *Peer, kp *bhcrypto.Keypair) bool {
	return r.install(p, kp, p.keypairs.establish)
}

// install adds kp to the index table, then lets rotate make it a session
// of p. If rotate refuses (p was removed), kp leaves the index again;
// otherwise the session rotate replaced is retired.
func (r *Router) install(p *Peer, kp *bhcrypto.Keypair, rotate func(*bhcrypto.Keypair) (*bhcrypto.Keypair, bool)) bool {
	r.index.add(p, kp)
	gone, ok := rotate(kp)
	if !ok {
		r.retire(kp)
		return false
	}
	r.retire(gone)
	return true
}

// expireSessions forgets p's sessions that are too old to keep. Called by
// the handshake loop's timers.
func (r *Router) expireSessions(p *Peer, now time.Time) {
	gone := p.keypairs.expire(now)
	r.retire(gone[:]...)
}
