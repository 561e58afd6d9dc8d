package router

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// handshaker is the handshake loop (loop) and the state it owns. The
// Router wires it: r gives it the devices, identity, routing state,
// session index, drops, clock and log, which it reads (it changes sessions
// only through the index and each Peer's keypairs, and routing state
// never). Concurrency:
//
//   - receive (the inbox) runs in the outside loop, want in the data
//     path, anywhere; both only send on channels and never block.
//   - count is written by the handshake loop and by the outside loop
//     (a confirmed session) and read by any goroutine.
//   - everything else belongs to the handshake loop alone.
type handshaker struct {
	r    *Router
	rand io.Reader // receiver indices and jitter
	// gate decides which handshake messages may cost us work (gate.go).
	gate *handshakeGate

	// The inbox. The outside loop takes a message from free, fills it
	// and sends it on queue; the loop handles it and puts it back.
	// queue holds every message of free, so a send never blocks.
	queue chan *hsMessage
	free  chan *hsMessage
	// trigger carries the data path's requests for a session (want).
	trigger chan *Peer
	// hold keeps the data path from asking for new sessions while our
	// pace refuses them (wantSession).
	hold  paceHold
	count handshakeCounters

	// Owned by the handshake loop.
	pending    map[uint32]*Peer // our initiations in flight, by receiver index
	scratch    []byte           // buffer for the keepalives of timers
	reach      reachLog         // unreachable gateways, batched logging
	lastDrops  [numDirections][numReasons]uint64
	lastDropLg int64
	lastGC     int64
}

// handshakeCounters count handshakes this gateway took part in.
type handshakeCounters struct {
	initiated, completed, answered, timedOut atomic.Uint64
	// dh counts handshake messages that reached Diffie-Hellman work:
	// only ones with a valid mac1 (and, under load, a cookie) do.
	dh atomic.Uint64
	// cookieReplies counts cookie replies sent.
	cookieReplies atomic.Uint64
	// triggers counts the data path's requests the handshake loop took
	// (want): at most a few per handshake attempt.
	triggers atomic.Uint64
	// previousKey counts initiations answered that were made to our
	// previous static key or with a peer's, during an overlap (keys.go).
	previousKey atomic.Uint64
}

// hsMessage is a handshake datagram waiting for the handshake loop. The
// outside loop copies into preallocated messages from a free list so a
// flood of handshakes cannot make it allocate or block.
type hsMessage struct {
	buf  []byte
	n    int
	from netip.AddrPort
}

// newHandshaker returns r's handshaker with an inbox of queueLen
// messages, allocated now.
func newHandshaker(r *Router, rand io.Reader, queueLen int, gate *handshakeGate) *handshaker {
	h := &handshaker{
		r: r, rand: rand, gate: gate,
		queue:   make(chan *hsMessage, queueLen),
		free:    make(chan *hsMessage, queueLen),
		trigger: make(chan *Peer, 1024),
		pending: make(map[uint32]*Peer),
		scratch: make([]byte, bhcrypto.TransportOverhead+bhcrypto.PaddingMultiple),
	}
	for range queueLen {
		h.free <- &hsMessage{buf: make([]byte, bhcrypto.InitiationSize)}
	}
	return h
}

// receive hands a handshake message to the handshake loop, or drops
// it when the loop is behind. Sizes and mac1 are checked here, before any
// copy, without allocating: it runs in the outside loop, which a flood
// of handshake-shaped garbage must not slow down or grow. mac1 is the
// calling loop's own checker (outsideBatch.mac1).
func (h *handshaker) receive(msg []byte, from netip.AddrPort, mac1 *bhcrypto.MAC1Checker) {
	want := bhcrypto.InitiationSize
	switch msg[0] {
	case bhcrypto.MsgResponse:
		want = bhcrypto.ResponseSize
	case bhcrypto.MsgCookieReply:
		want = bhcrypto.CookieReplySize
	}
	if len(msg) != want {
		h.r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	// mac1 needs only our public key: whoever lacks it is dropped here,
	// before taking a queue slot, and never costs Diffie-Hellman.
	if msg[0] != bhcrypto.MsgCookieReply && !h.gate.checkMAC1(mac1, msg, from) {
		h.r.drops.Add(Outside, ReasonBadMAC, 1)
		return
	}
	var m *hsMessage
	select {
	case m = <-h.free:
	default:
		h.r.drops.Add(Outside, ReasonHandshakeBusy, 1)
		return
	}
	m.n = copy(m.buf, msg)
	m.from = from
	h.queue <- m // never blocks: queue holds every message of free
}

// loop owns all handshake state. It answers and completes
// handshakes, retransmits, gives up, and flushes queued packets.
func (h *handshaker) loop(ctx context.Context) error {
	// One ticker drives the probes (every st.probeTick, a quarter of the
	// shortest probe interval) and, every TimerTick, the slower session
	// timers.
	period := h.r.state.Load().probeTick
	tick, stop := h.r.clock.Ticker(period)
	defer func() { stop() }()
	scratch := make([]byte, h.r.set.bufSize)
	var lastTimers time.Time
	for {
		select {
		case <-ctx.Done():
			return nil
		case m := <-h.queue:
			h.handle(m.buf[:m.n], m.from, h.r.clock.Now(), scratch)
			h.free <- m
		case p := <-h.trigger:
			h.triggered(p, h.r.clock.Now(), scratch)
		case now := <-tick:
			if now.Sub(lastTimers) >= TimerTick {
				lastTimers = now
				h.timers(now)
			}
			st := h.r.state.Load()
			h.r.probe.run(st, now)
			if st.probeTick != period {
				stop()
				period = st.probeTick
				tick, stop = h.r.clock.Ticker(period)
			}
		}
	}
}

func (h *handshaker) handle(msg []byte, from netip.AddrPort, now time.Time, scratch []byte) {
	if msg[0] == bhcrypto.MsgCookieReply {
		h.handleCookieReply(msg)
		return
	}
	// A response for a pending index that already failed
	// maxResponseFailures times is not read: its index is no secret
	// from whoever relayed or watched our initiation, and a failed
	// response leaves the initiation pending (so that a forgery cannot
	// kill it), so without a bound each forgery would cost us the
	// response's Diffie-Hellman. The retransmission, with a new index,
	// starts over.
	// A response for no pending index can complete nothing: dropped
	// before the gate, it earns no cookie reply either.
	if msg[0] == bhcrypto.MsgResponse {
		p := h.pendingFor(msg)
		switch {
		case p == nil:
			h.r.drops.Add(Outside, ReasonUnknownIndex, 1)
			return
		case p.hs.responseFailures >= maxResponseFailures:
			h.r.drops.Add(Outside, ReasonResponseLimited, 1)
			return
		}
	}
	// Under load, make senders prove they receive at their address
	// before doing any Diffie-Hellman for them, and bound each source,
	// responses as much as initiations (as WireGuard does: a response
	// with a pending index is no proof, the index is seen by whoever
	// relays or watches our initiation). A responder that gets our
	// cookie reply answers our next attempt with mac2. A configured
	// peer endpoint that proved it is never rate limited: the per-peer
	// initiation interval bounds it instead. A stand-in (a gateway
	// reached through a hub) is no such endpoint: the hub names the
	// origin, so it is limited like any source.
	if h.gate.underLoad(len(h.queue), cap(h.queue), now) {
		known := !isStandIn(from) && h.r.state.Load().byEndpoint[from] != nil
		if reply, drop, ok := h.gate.admit(msg, from, known); !ok {
			h.r.drops.Add(Outside, drop, 1)
			if reply != nil {
				h.count.cookieReplies.Add(1)
				h.r.bind.Send([][]byte{reply}, from)
			}
			return
		}
	}
	h.count.dh.Add(1)
	switch msg[0] {
	case bhcrypto.MsgInitiation:
		h.handleInitiation(msg, from, now)
	case bhcrypto.MsgResponse:
		h.handleResponse(msg, from, now, scratch)
	}
}

// maxResponseFailures is how many responses that fail to complete one
// pending initiation are read (each costs two X25519) before the rest
// for that index are dropped unread: an honest responder sends one per
// initiation, so a second is a retransmission's echo or a forgery.
const maxResponseFailures = 2

// pendingFor returns the peer whose pending initiation the response msg
// answers, by receiver index alone (ConsumeResponse authenticates it),
// or nil.
func (h *handshaker) pendingFor(msg []byte) *Peer {
	idx, ok := bhcrypto.ResponseReceiverIndex(msg)
	if !ok {
		return nil
	}
	if p := h.pending[idx]; p != nil && p.hs.pending != nil && p.hs.pendingIndex == idx {
		return p
	}
	return nil
}

// handshakeDrop maps a handshake error to a drop reason.
func handshakeDrop(err error) Reason {
	switch {
	case errors.Is(err, bhcrypto.ErrMAC1):
		return ReasonBadMAC
	case errors.Is(err, bhcrypto.ErrKeyExpired):
		return ReasonKeyExpired
	case errors.Is(err, bhcrypto.ErrMessageSize):
		return ReasonBadSize
	case errors.Is(err, bhcrypto.ErrMessageType):
		return ReasonUnknownType
	default:
		return ReasonHandshakeFailed
	}
}

func (h *handshaker) handleInitiation(msg []byte, from netip.AddrPort, now time.Time) {
	// Made to our current key or, during an overlap, our previous one:
	// mac1 says which, so the second key costs no Diffie-Hellman.
	ring := h.r.keys.Load()
	ri, err := ring.ConsumeInitiation(msg, now)
	if err != nil {
		h.r.drops.Add(Outside, handshakeDrop(err), 1)
		return
	}
	st := h.r.state.Load()
	p := st.peers[ri.PeerStatic]
	if p == nil {
		h.r.drops.Add(Outside, ReasonUnknownPeer, 1)
		h.r.log.Debug("handshake from unknown key", "from", from)
		return
	}
	keys := p.keys.Load()
	ok, peerPrevious := keys.accepts(ri.PeerStatic, now)
	if !ok {
		h.noteKeyProblem(p, ReasonKeyExpired, "handshake refused: the gateway used its previous key after the overlap", now)
		return
	}
	if ri.PSK != (len(keys.psks) > 0) {
		h.noteKeyProblem(p, ReasonPSKMismatch, "handshake refused: one side of the site pair has a preshared key, the other none", now)
		return
	}
	if ri.PSK {
		if err := ri.SetPresharedKey(keys.psks[0]); err != nil {
			h.r.drops.Add(Outside, ReasonHandshakeFailed, 1)
			return
		}
	}
	// A replayed initiation must not replace a live session.
	if !ri.Timestamp.After(p.hs.lastTimestamp) {
		h.r.drops.Add(Outside, ReasonStaleHandshake, 1)
		return
	}
	// An honest peer initiates at most every RekeyTimeout; faster is a
	// flood (of fresh initiations by a peer, or a replay of a stolen key).
	if !p.hs.lastInitiation.IsZero() && now.Sub(p.hs.lastInitiation) < InitiationInterval {
		h.r.drops.Add(Outside, ReasonRateLimited, 1)
		return
	}
	idx, err := h.newIndex()
	if err != nil {
		h.r.log.Error("cannot allocate receiver index", "err", err)
		return
	}
	kp, resp, err := ring.Current.CreateResponse(ri, idx, now)
	if err != nil {
		h.r.drops.Add(Outside, ReasonHandshakeFailed, 1)
		return
	}
	if ri.Previous || peerPrevious {
		h.count.previousKey.Add(1)
		p.hsPreviousKey.Add(1)
	}
	p.hs.lastTimestamp = ri.Timestamp
	p.hs.lastInitiation = now
	keys.jar.AddMAC2(resp)
	keys.jar.Sent(resp)
	if !h.install(p, kp, p.keypairs.answer) {
		h.r.drops.Add(Outside, ReasonUnknownPeer, 1) // removed since we looked it up
		return
	}
	p.hs.reached = true
	h.r.roam(p, from)
	p.lastReceive.Store(h.r.mono.ns(now))
	h.count.answered.Add(1)
	p.hsAnswered.Add(1)
	if err := h.r.bind.Send([][]byte{resp}, from); err != nil {
		p.hsSendFailed.Add(1)
		h.reach.fail(p, "sending handshake response", err, now)
	}
}

func (h *handshaker) handleResponse(msg []byte, from netip.AddrPort, now time.Time, scratch []byte) {
	idx, ok := bhcrypto.ResponseReceiverIndex(msg)
	if !ok {
		h.r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	p := h.pending[idx]
	if p == nil || p.hs.pending == nil || p.hs.pendingIndex != idx {
		h.r.drops.Add(Outside, ReasonUnknownIndex, 1)
		return
	}
	if p.removed.Load() {
		// Removed by a reload since we initiated: the key may be
		// revoked. establish refuses too, should the reload come
		// later than this check.
		h.dropPending(p)
		h.r.drops.Add(Outside, ReasonUnknownPeer, 1)
		return
	}
	kp, err := p.hs.pending.ConsumeResponse(msg, now)
	if err != nil {
		p.hsFailed.Add(1)
		p.hs.responseFailures++
		if errors.Is(err, bhcrypto.ErrPSK) {
			h.noteKeyProblem(p, ReasonPSKMismatch, "handshake failed with every preshared key of the site pair: the keys differ", now)
			return
		}
		h.r.drops.Add(Outside, handshakeDrop(err), 1)
		return
	}
	if p.hs.pending.PSKUsed() > 0 {
		p.hsSecondPSK.Add(1)
	}
	delete(h.pending, idx)
	p.hs.pending = nil
	p.handshaking.Store(false)
	p.hs.firstAttempt = time.Time{}
	old := p.current.Load()
	first := old == nil || !usable(old, now)
	if !h.establish(p, kp) {
		h.r.drops.Add(Outside, ReasonUnknownPeer, 1) // removed by a reload
		return
	}
	p.hs.reached = true
	h.r.roam(p, from)
	p.lastHandshake.Store(h.r.mono.ns(now))
	p.lastReceive.Store(h.r.mono.ns(now))
	p.live.acked.Store(h.r.mono.ns(now)) // our initiation reached it
	h.count.completed.Add(1)
	p.hsCompleted.Add(1)
	h.r.log.Debug("session established", "site", p.site, "gateway", p.name, "endpoint", from)
	h.reach.reached(p, first)
	// The responder uses the session only once it sees us use it: send
	// the queued packets, or a keepalive when there are none.
	if h.flushQueue(p, kp, scratch) == 0 {
		h.sendKeepalive(p, kp, scratch)
	}
}

// handleCookieReply stores a cookie a loaded peer sent in answer to our
// initiation; the next retransmission carries mac2 made with it.
func (h *handshaker) handleCookieReply(msg []byte) {
	idx, ok := bhcrypto.CookieReplyReceiverIndex(msg)
	if !ok {
		h.r.drops.Add(Outside, ReasonBadSize, 1)
		return
	}
	p := h.pending[idx]
	if p == nil {
		// A reply to a response we sent: find the peer by session.
		if e, ok := h.r.index.lookup(idx); ok {
			p = e.peer
		}
	}
	if p == nil {
		h.r.drops.Add(Outside, ReasonUnknownIndex, 1)
		return
	}
	if err := p.keys.Load().jar.ConsumeReply(msg); err != nil {
		h.r.drops.Add(Outside, ReasonBadCookie, 1)
		return
	}
	h.r.log.Debug("peer is under load and sent a cookie", "site", p.site, "gateway", p.name)
}

// triggered takes one request of the data path (want) for p at now.
func (h *handshaker) triggered(p *Peer, now time.Time, scratch []byte) {
	h.count.triggers.Add(1)
	p.wantHandshake.Store(false)
	h.onTrigger(p, now, scratch)
}

// onTrigger runs when the data path found no usable session for p, or one
// due for rekeying, or packets queued behind a freshly confirmed session.
func (h *handshaker) onTrigger(p *Peer, now time.Time, scratch []byte) {
	if p.removed.Load() {
		p.queue.Clear()
		return
	}
	kp := p.current.Load()
	if kp != nil && usable(kp, now) {
		h.flushQueue(p, kp, scratch)
		if !h.r.needsRekey(kp, now) {
			return
		}
	}
	h.initiate(p, now, false)
}

// initiate sends a handshake initiation to p unless one is in flight.
// retransmit forces a new attempt for a pending handshake.
//
// New attempts (not retransmits) are paced to InitiationRate: after a
// restart with hundreds of peers, initiating to all of them at once would
// bring their responses back faster than the loop answers them, tip it
// "under load" and cost every peer a cookie round and a RekeyTimeout.
// An attempt the pace holds back is made again by the caller's next run
// (the timers, or the next packet that wants a session once the pace
// allows one: see paceHold).
func (h *handshaker) initiate(p *Peer, now time.Time, retransmit bool) {
	if p.hs.pending != nil && !retransmit {
		return
	}
	// A gateway behind NAT, with no endpoint configured nor learned
	// yet, is waited for: it starts its sessions itself (package
	// transit), and an initiation could go nowhere.
	if !p.Endpoint().IsValid() {
		return
	}
	if !retransmit && !h.gate.pace() {
		h.hold.refused(h.r.mono.ns(now))
		return
	}
	if p.hs.firstAttempt.IsZero() {
		p.hs.firstAttempt = now
	}
	if p.hs.pending != nil {
		h.dropPending(p)
	}
	idx, err := h.newIndex()
	if err != nil {
		h.r.log.Error("cannot allocate receiver index", "err", err)
		return
	}
	// Always with our current key, to the peer's current key.
	keys := p.keys.Load()
	in, msg, err := h.r.keys.Load().Current.CreateInitiationPSK(keys.cur, keys.psks, idx, now)
	if err != nil {
		h.r.log.Error("cannot create handshake initiation", "site", p.site, "gateway", p.name, "err", err)
		return
	}
	keys.jar.AddMAC2(msg)
	keys.jar.Sent(msg)
	p.hs.pending = in
	p.handshaking.Store(true)
	p.hs.pendingIndex = idx
	p.hs.responseFailures = 0
	p.hs.lastSent = now
	p.hs.retryAfter = RekeyTimeout + h.jitter()
	h.pending[idx] = p
	h.count.initiated.Add(1)
	p.hsInitiated.Add(1)
	if err := h.r.bind.Send([][]byte{msg}, p.Endpoint()); err != nil {
		p.hsSendFailed.Add(1)
		h.reach.fail(p, "sending handshake initiation", err, now)
	}
}

// dropPending abandons p's pending initiation, zeroing its ephemeral key.
func (h *handshaker) dropPending(p *Peer) {
	delete(h.pending, p.hs.pendingIndex)
	p.hs.pending.Abandon()
	p.hs.pending = nil
	p.handshaking.Store(false)
}

// jitter returns a random delay in [0, RekeyJitter).
func (h *handshaker) jitter() time.Duration {
	var b [8]byte
	if _, err := io.ReadFull(h.rand, b[:]); err != nil {
		return 0
	}
	return time.Duration(binary.LittleEndian.Uint64(b[:]) % uint64(RekeyJitter))
}

// establish installs kp, a handshake we initiated and completed, as p's
// current session (see keypairs), and reports whether it did: a peer
// removed meanwhile gets nothing. Called by the handshake loop.
func (h *handshaker) establish(p *Peer, kp *bhcrypto.Keypair) bool {
	return h.install(p, kp, p.keypairs.establish)
}

// install adds kp to the index table, then lets rotate make it a session
// of p. If rotate refuses (p was removed), kp leaves the index again;
// otherwise the session rotate replaced is retired.
func (h *handshaker) install(p *Peer, kp *bhcrypto.Keypair, rotate func(*bhcrypto.Keypair) (*bhcrypto.Keypair, bool)) bool {
	h.r.index.add(p, kp)
	gone, ok := rotate(kp)
	if !ok {
		h.r.retire(kp)
		return false
	}
	h.r.retire(gone)
	return true
}

// newIndex returns a fresh random receiver index not in use.
func (h *handshaker) newIndex() (uint32, error) {
	var b [4]byte
	for range 64 {
		if _, err := io.ReadFull(h.rand, b[:]); err != nil {
			return 0, err
		}
		idx := binary.LittleEndian.Uint32(b[:])
		if idx == 0 || h.r.index.has(idx) || h.pending[idx] != nil {
			continue
		}
		return idx, nil
	}
	return 0, errors.New("router: no free receiver index")
}

// want asks the handshake loop to set up a session with p. It
// never blocks; repeated calls before the loop runs collapse into one.
func (h *handshaker) want(p *Peer) {
	if !p.wantHandshake.CompareAndSwap(false, true) {
		return
	}
	select {
	case h.trigger <- p:
	default:
		p.wantHandshake.Store(false)
	}
}

// wantSession is want for a new session with p, at now: p has no usable
// one, or its session is due for rekeying. While our pace holds new
// attempts back (paceHold), it does not wake the handshake loop, which
// could only be refused again: a peer's rekey (or a site without a
// session) would otherwise wake it for every packet sent.
func (h *handshaker) wantSession(p *Peer, now time.Time) {
	if h.hold.holds(h.r.mono.ns(now)) {
		return
	}
	h.want(p)
}

// paceHold is how long the data path holds back its requests for new
// sessions (wantSession) after our pace (handshakeGate.pace) refused an
// attempt: until the pace's bucket has a token again, 1/InitiationRate
// later. The pace is one bucket for every peer, so one hold serves them
// all. The handshake loop writes it (initiate); the data path reads it,
// and only on its way to asking for a session.
type paceHold struct {
	until atomic.Int64 // monotonic nanoseconds (monoEpoch); 0: none yet
}

// refused notes, at now (monotonic nanoseconds), that the pace refused
// an attempt.
func (h *paceHold) refused(now int64) {
	h.until.Store(now + int64(time.Second/InitiationRate))
}

// holds reports whether requests for new sessions are held back at now.
func (h *paceHold) holds(now int64) bool { return now < h.until.Load() }
