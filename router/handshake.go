package router

import (
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
	tick, stop := r.clock.Ticker(TimerTick)
	defer stop()
	scratch := make([]byte, r.bufSize)
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-r.hsQueue:
			r.handleHandshake(m.buf[:m.n], m.from, r.clock.Now(), scratch)
			r.hsFree <- m
		case p := <-r.trigger:
			p.wantHandshake.Store(false)
			r.onTrigger(p, r.clock.Now(), scratch)
		case now := <-tick:
			r.timers(now)
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
	if len(r.hsQueue) >= cap(r.hsQueue)/8 {
		if !r.cookies.CheckMAC2(msg, from) {
			r.drops.Add(Outside, ReasonCookieRequired, 1)
			if reply, err := r.cookies.CreateReply(msg, from); err == nil {
				r.handshakes.cookieReplies.Add(1)
				r.bind.Send([][]byte{reply}, from)
			}
			return
		}
		if !r.limiter.Allow(from.Addr()) {
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
	p.jar.AddMAC2(resp)
	p.jar.Sent(resp)
	r.index.update(func(m map[uint32]indexEntry) { m[idx] = indexEntry{peer: p, kp: kp} })
	r.retire(p.next.Swap(kp))
	ep := from
	p.endpoint.Store(&ep)
	p.lastReceive.Store(now.UnixNano())
	r.handshakes.answered.Add(1)
	p.hsAnswered.Add(1)
	if err := r.bind.Send([][]byte{resp}, from); err != nil {
		r.log.Warn("sending handshake response failed", "site", p.site, "gateway", p.name, "err", err)
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
	kp, err := p.hs.pending.ConsumeResponse(msg, now)
	if err != nil {
		r.drops.Add(Outside, handshakeDrop(err), 1)
		p.hsFailed.Add(1)
		return
	}
	delete(r.pending, idx)
	p.hs.pending = nil
	p.hs.firstAttempt = time.Time{}
	r.index.update(func(m map[uint32]indexEntry) { m[idx] = indexEntry{peer: p, kp: kp} })
	prev := p.current.Swap(kp)
	r.retire(p.previous.Swap(prev))
	ep := from
	p.endpoint.Store(&ep)
	p.lastHandshake.Store(now.UnixNano())
	p.lastReceive.Store(now.UnixNano())
	r.handshakes.completed.Add(1)
	p.hsCompleted.Add(1)
	r.log.Info("session established", "site", p.site, "gateway", p.name, "endpoint", from)
	// The responder uses the session only once it sees us use it: send
	// the queued packets, or a keepalive when there are none.
	if r.flushQueue(p, kp, scratch) == 0 {
		r.sendKeepalive(p, kp, scratch, false)
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
	r.log.Info("peer is under load and sent a cookie", "site", p.site, "gateway", p.name)
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
func (r *Router) initiate(p *Peer, now time.Time, retransmit bool) {
	if p.hs.pending != nil && !retransmit {
		return
	}
	if p.hs.firstAttempt.IsZero() {
		p.hs.firstAttempt = now
	}
	if p.hs.pending != nil {
		delete(r.pending, p.hs.pendingIndex)
		p.hs.pending = nil
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
	p.hs.pendingIndex = idx
	p.hs.lastSent = now
	p.hs.retryAfter = RekeyTimeout + r.jitter()
	r.pending[idx] = p
	r.handshakes.initiated.Add(1)
	p.hsInitiated.Add(1)
	if err := r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		r.log.Warn("sending handshake initiation failed", "site", p.site, "gateway", p.name, "endpoint", p.Endpoint(), "err", err)
	}
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
	r.timersRan.Store(now.UnixNano())
	st := r.state.Load()
	for idx, p := range r.pending {
		if p.removed.Load() {
			delete(r.pending, idx)
			p.hs.pending = nil
		}
	}
	for _, p := range st.order {
		if p.hs.pending != nil && now.Sub(p.hs.lastSent) >= p.hs.retryAfter {
			if now.Sub(p.hs.firstAttempt) >= RekeyAttemptTime {
				delete(r.pending, p.hs.pendingIndex)
				p.hs.pending = nil
				p.hs.firstAttempt = time.Time{}
				n := p.queue.clear()
				r.drops.Add(Inside, ReasonHandshakeTimeout, uint64(n))
				r.handshakes.timedOut.Add(1)
				p.hsFailed.Add(1)
				r.log.Warn("handshake gave up", "site", p.site, "gateway", p.name,
					"endpoint", p.Endpoint(), "after", RekeyAttemptTime, "dropped_packets", n)
			} else {
				r.initiate(p, now, true)
			}
		}
		r.liveness(p, now)
		if kp := p.current.Load(); kp != nil && now.Sub(kp.Created) >= wipeAfter {
			r.retire(p.current.Swap(nil), p.previous.Swap(nil))
		}
		if kp := p.next.Load(); kp != nil && now.Sub(kp.Created) >= RejectAfterTime {
			r.retire(p.next.Swap(nil))
		}
	}
	r.pollFilter()
	r.logDrops(now)
	if now.UnixNano()-r.lastGC >= int64(limiterGCInterval) {
		r.lastGC = now.UnixNano()
		r.limiter.GC()
		r.icmpLimit.GC()
		r.badMAC.GC()
		r.forgetBlocks(now)
	}
}

// liveness sends keepalives and notices peers that stopped answering.
//
//   - With a keepalive interval configured, the session is set up
//     without waiting for traffic, and an empty message goes out
//     whenever nothing else was sent for that long (NAT mappings stay
//     open, and the peer sees us alive).
//   - Without one, a peer that sends to us while we have sent it
//     nothing for KeepaliveTimeout gets a keepalive (at most one per
//     KeepaliveTimeout), so one-way traffic does not look like a dead
//     path to it.
//   - If we have been sending for NoAnswerTimeout and heard nothing,
//     the session is presumed dead (the peer restarted or the path
//     broke) and a new handshake starts.
//
// Configured keepalives expect an answer (the peer's passive keepalive),
// so with them a silent peer is noticed even without traffic. A peer is
// reported down when it leaves us unanswered for NoAnswerTimeout, and up
// again on its next authenticated packet.
func (r *Router) liveness(p *Peer, now time.Time) {
	kp := p.current.Load()
	ns := now.UnixNano()
	sent, recv := p.lastSend.Load(), p.lastReceive.Load()
	ka := p.keepalive.Load()
	scratch := r.keepaliveScratch
	if ka > 0 && (kp == nil || !usable(kp, now)) && p.hs.pending == nil {
		// A configured keepalive means "keep this path up": set up
		// the session without waiting for traffic.
		r.initiate(p, now, false)
	}
	if kp != nil && usable(kp, now) {
		switch {
		case ka > 0 && ns-sent >= ka:
			r.sendKeepalive(p, kp, scratch, true)
		case ka == 0 && recv > sent && ns-sent >= int64(KeepaliveTimeout):
			r.sendKeepalive(p, kp, scratch, false)
		}
	}
	first := p.unanswered.Load()
	silent := first != 0 && ns-first >= int64(NoAnswerTimeout)
	if silent && !p.hs.down {
		p.hs.down = true
		p.hs.downSince = ns
		p.down.Store(true)
		r.log.Warn("peer not answering", "site", p.site, "gateway", p.name, "endpoint", p.Endpoint(),
			"last_receive", unixTime(recv), "unanswered_since", unixTime(first))
		if kp != nil && p.hs.pending == nil {
			r.initiate(p, now, false)
		}
		p.unanswered.Store(0) // the handshake's outcome decides from here
	}
	if p.hs.down && recv > p.hs.downSince {
		p.hs.down = false
		p.down.Store(false)
		r.log.Info("peer answering again", "site", p.site, "gateway", p.name, "endpoint", p.Endpoint())
	}
}

// logDrops logs the drops since the last summary, at most once per
// DropLogInterval, so a flood of bad packets cannot flood the log.
func (r *Router) logDrops(now time.Time) {
	if now.UnixNano()-r.lastDropLg < int64(DropLogInterval) {
		return
	}
	r.lastDropLg = now.UnixNano()
	cur := r.drops.snapshot()
	var attrs []any
	for d := range cur {
		for reason, n := range cur[d] {
			if delta := n - r.lastDrops[d][reason]; delta > 0 {
				attrs = append(attrs, Direction(d).String()+"."+Reason(reason).String(), delta)
			}
		}
	}
	r.lastDrops = cur
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
		ns := r.clock.Now().UnixNano()
		p.lastSend.Store(ns)
		p.unanswered.CompareAndSwap(0, ns)
		sent++
	})
	return sent
}

// sendKeepalive sends an empty transport message. expectAnswer marks it as
// something the peer should answer, for dead-peer detection.
func (r *Router) sendKeepalive(p *Peer, kp *bhcrypto.Keypair, scratch []byte, expectAnswer bool) {
	msg, err := kp.Seal(scratch, 0)
	if err != nil {
		return
	}
	if err := r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		r.log.Debug("keepalive send failed", "site", p.site, "gateway", p.name, "err", err)
		return
	}
	ns := r.clock.Now().UnixNano()
	p.lastSend.Store(ns)
	if expectAnswer {
		p.unanswered.CompareAndSwap(0, ns)
	}
}
