package router

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/probestate"
)

// Probes are transport messages whose plaintext is a control message
// instead of an IP packet:
//
//	byte 0     probeRequest or probeReply (high nibble 1: never an IP version)
//	byte 1     flags about the sender (flagCannotDeliver, flagLanes, flagExpress, flagDraining); unknown ones ignored
//	bytes 2-7  reserved, zero; ignored
//	bytes 8-15 echo: opaque to the answerer, copied into the reply
//	bytes 16-  padding, any length, ignored (path MTU probes, see probestate.PathMTU)
//
// They are authenticated like data, so only the peer can prove itself
// alive, and requests are answered at once by the outside loop, with a
// reply of probeLen bytes whatever the request's size. The sender puts
// its monotonic send time in echo, which names the probe: a reply counts
// only if it echoes a probe still in flight (probestate.InFlight), and the round
// trip is read off it.
// Gateways that predate flags send zero in byte 1 and ignore bytes 1-7
// and the padding, so both directions stay compatible.
const (
	probeRequest = 0x10
	probeReply   = 0x11
	probeLen     = bhcrypto.PaddingMultiple // one padding block, no extra padding

	// flagCannotDeliver: the sender's LAN side is broken (see
	// Router.SetCanDeliver): it must not get flows.
	flagCannotDeliver = 0x01
	// flagLanes: the sender reads the lane byte of transport messages
	// (package crypto's wire format), so it may get non-zero ones on
	// the session that carried this message. Gateways that predate it
	// drop such messages; they never set it.
	flagLanes = 0x02
	// flagExpress: the sender has an express lane (udp.ListenExpress),
	// so it may get lane byte udp.ExpressLane on this session, which its
	// kernel steers to a socket of its own (package sparse).
	flagExpress = 0x04
	// flagDraining: the sender is shutting down (Router.SetDraining):
	// it still forwards what reaches it, but must get no new flows, and
	// its flows move to its site's other gateways now. Gateways that
	// predate it ignore it, and notice the stop by missed probes.
	flagDraining = 0x08
	knownFlags   = flagCannotDeliver | flagLanes | flagExpress | flagDraining
)

// control is a parsed control message.
type control struct {
	typ, flags byte
	echo       uint64
	size       int // plaintext bytes, padding included
}

// isControl reports whether a decrypted plaintext is a control message.
func isControl(plain []byte) bool { return len(plain) > 0 && plain[0]>>4 == 1 }

// parseControl parses a decrypted control message. Unknown flags and the
// reserved bytes are ignored; an unknown type or a short message is
// refused.
func parseControl(b []byte) (control, bool) {
	if len(b) < probeLen || (b[0] != probeRequest && b[0] != probeReply) {
		return control{}, false
	}
	return control{typ: b[0], flags: b[1] & knownFlags, echo: binary.BigEndian.Uint64(b[8:16]), size: len(b)}, true
}

// probeScratch is a buffer for one sealed control message.
func probeScratch() []byte {
	return make([]byte, bhcrypto.TransportOverhead+probeLen)
}

// sealControl seals c into buf, which must hold
// TransportOverhead+c.size bytes; c.size is at least probeLen.
func sealControl(kp *bhcrypto.Keypair, buf []byte, c control) ([]byte, error) {
	body := buf[bhcrypto.TransportHeaderSize : bhcrypto.TransportHeaderSize+c.size]
	clear(body)
	body[0], body[1] = c.typ, c.flags
	binary.BigEndian.PutUint64(body[8:16], c.echo)
	return kp.Seal(buf, c.size)
}

// prober is the health of the remote gateways as this gateway probes it:
// the liveness state machine and path MTU checks of every gateway (run,
// in the handshake loop), the answers to their probes (handleControl, in
// the outside loop), and what this gateway says of itself in every
// control message (cannotDeliver, draining). Each Peer's liveness holds the state
// per gateway (liveness.go names its writers); the Router wires it (r:
// bind, drops, clock, log, MTU, and the handshaker's reach log).
type prober struct {
	r *Router
	// cannotDeliver is set while this gateway cannot deliver to its own
	// site (Router.SetCanDeliver, any goroutine); every control message
	// says so.
	cannotDeliver atomic.Bool
	// draining is set once this gateway is shutting down
	// (Router.SetDraining, any goroutine); every control message says
	// so.
	draining atomic.Bool

	// Owned by the handshake loop (run).
	probes     controlBatch // probes of one run
	bigProbes  controlBatch // path MTU probes of one run
	advertised byte         // the flags of our last run
}

func newProber(r *Router) *prober {
	pr := &prober{r: r}
	pr.probes.probes, pr.bigProbes.probes = true, true
	pr.bigProbes.size = bhcrypto.TransportOverhead + r.set.mtu // a path MTU probe is a full-size packet
	return pr
}

// flags are the flags this gateway sends in every control message.
func (pr *prober) flags() byte {
	var f byte = flagLanes
	if pr.r.express.lane != nil {
		f |= flagExpress
	}
	if pr.r.set.noLaneBytes {
		f = 0
	}
	if pr.cannotDeliver.Load() {
		f |= flagCannotDeliver
	}
	if pr.draining.Load() {
		f |= flagDraining
	}
	return f
}

// SetCanDeliver says whether this gateway can deliver to its own site
// (its LAN link is up and it has a route to every node CIDR; the daemon
// checks). A gateway that cannot tells every remote gateway in its
// probes and probe replies, and they move its flows to the site's other
// gateways (LiveDown, DownCannotDeliver). The handshake loop sends a
// probe to every gateway at its next tick after a change, so they learn
// within a round trip. Safe from any goroutine.
func (r *Router) SetCanDeliver(ok bool) { r.probe.cannotDeliver.Store(!ok) }

// SetDraining says whether this gateway is draining: shutting down, so
// remote gateways must move its flows to its site's other gateways now
// (LiveDown, DownDraining) while it keeps forwarding what still reaches
// it. As for SetCanDeliver, the handshake loop sends a probe to every
// gateway with a session at its next tick after a change, so they learn
// within a round trip instead of after ProbeMisses silent intervals.
// Safe from any goroutine.
func (r *Router) SetDraining(on bool) { r.probe.draining.Store(on) }

// Draining reports what SetDraining last set (false until it is called).
func (r *Router) Draining() bool { return r.probe.draining.Load() }

// CanDeliver reports what SetCanDeliver last set (true until it is
// called).
func (r *Router) CanDeliver() bool { return !r.probe.cannotDeliver.Load() }

// handleControl acts on an authenticated control message from p, received
// on kp from `from`. It runs in the outside loop: a probe's reply is sealed
// into b's reply batch, which receiveBatch sends when the batch is done.
// It allocates nothing.
func (pr *prober) handleControl(b *outsideBatch, p *Peer, kp *bhcrypto.Keypair, plain []byte, from netip.AddrPort, now time.Time) {
	c, ok := parseControl(plain)
	if !ok {
		pr.r.drops.Add(Outside, ReasonMalformed, 1)
		return
	}
	mono := pr.r.mono.ns(now)
	if c.typ == probeReply && !p.live.inflight.Answer(c.echo, mono, p.live.timeout()) {
		// Late, a second answer, or never asked: it proves nothing
		// now, and its flags may be as old.
		pr.r.drops.Add(Outside, ReasonStaleProbeReply, 1)
		return
	}
	p.live.cannotDeliver.Store(c.flags&flagCannotDeliver != 0)
	p.live.draining.Store(c.flags&flagDraining != 0)
	// What the peer reads is learned for the session we send on, from
	// messages on that session only. After both gateways initiated at
	// once, each sends on the session it confirmed last: the peer's own
	// probes then arrive on our previous session, and booking their
	// flags would move laneSession off our current one at every probe
	// (lane byte 0 until our next reply). Our probes go on current, so
	// their replies always speak for it.
	if kp != nil && kp == p.current.Load() {
		tag := laneTag(kp)
		if c.flags&flagLanes != 0 && p.laneSession.Load() != tag {
			p.laneSession.Store(tag)
		}
		if c.flags&flagExpress != 0 && p.expressSession.Load() != tag {
			p.expressSession.Store(tag)
		}
	}
	switch c.typ {
	case probeRequest:
		buf := b.replies.next()
		if buf == nil {
			return // more probes than the batch has slots: cannot happen
		}
		msg, err := sealControl(kp, buf, control{typ: probeReply, flags: pr.flags(), echo: c.echo, size: probeLen})
		if err != nil {
			return // session exhausted: the handshake loop rekeys
		}
		b.replies.add(msg, from, p)
	case probeReply: // to a probe in flight
		p.live.acked.Store(mono)
		if c.echo&probestate.MTUEcho != 0 {
			p.live.pmtu.Answer(c.echo)
			return
		}
		p.live.probeReplies.Add(1)
		if rtt := mono - probestate.SentAt(c.echo); rtt >= 0 {
			p.live.rtt.Store(rtt)
		}
	}
}

// run runs the liveness state machine of every remote gateway and
// sends the probes it asks for. It runs in the handshake loop every
// ProbeTick.
func (pr *prober) run(st *routingState, now time.Time) {
	mono := pr.r.mono.ns(now)
	flags := pr.flags()
	// A change of what we can deliver goes to every gateway at once.
	announce := flags != pr.advertised
	pr.advertised = flags
	for _, p := range st.order {
		kp := p.current.Load()
		session := kp != nil && usable(kp, now)
		a := p.live.evaluate(mono, p.live.acked.Load(), p.txPackets.Load(), session)
		a.probe = a.probe || (announce && session)
		if session && p.hs.laneAsked != laneTag(kp) && p.laneSession.Load() != laneTag(kp) {
			// A new session: learn at once whether the peer reads
			// lane bytes on it (its reply says), rather than at
			// the next probe of its interval.
			p.hs.laneAsked = laneTag(kp)
			a.probe = true
		}
		if a.changed {
			// No new handshake here: a peer that lost our session
			// (it restarted) starts one itself when our probes hit
			// an index it does not know, and a dead path would
			// only add handshake load; on a loaded gateway that
			// load would feed more false downs.
			pr.logChange(p, a.from, now)
		}
		if size := pr.mtuStep(p, mono); size > 0 {
			// With a small companion, so a lost big one can be
			// told from a silent path.
			echo := p.live.pmtu.Sent(size, mono)
			if pr.queue(&pr.bigProbes, p, kp, control{typ: probeRequest, flags: flags, echo: echo, size: size}) {
				p.live.inflight.Sent(echo)
			}
			a.probe = session
		}
		if !a.probe {
			continue
		}
		if pr.queue(&pr.probes, p, kp, control{typ: probeRequest, flags: flags, echo: uint64(mono), size: probeLen}) {
			p.live.inflight.Sent(uint64(mono))
			p.live.lastProbe.Store(mono)
			p.live.probesSent.Add(1)
		}
	}
	pr.send(&pr.probes)
	pr.send(&pr.bigProbes)
}

// queue seals c for p into a slot of batch, growing it if needed,
// and reports whether it did.
func (pr *prober) queue(batch *controlBatch, p *Peer, kp *bhcrypto.Keypair, c control) bool {
	buf := batch.next()
	if buf == nil {
		batch.grow()
		buf = batch.next()
	}
	msg, err := sealControl(kp, buf, c)
	if err != nil {
		return false
	}
	batch.add(msg, p.Endpoint(), p)
	return true
}

// Path MTU probing (probestate.PathMTU): now and then each gateway that
// is up gets a probe padded to the tunnel's full size, sent with a small
// one; a gateway whose full-size probes go unanswered while the small
// ones pass is "up, MTU-degraded" and keeps no flows while a whole
// gateway of its site is up.
const (
	// MTUProbeFactor: the path to a gateway that carries our traffic is
	// checked at full size every MTUProbeFactor probe intervals
	// (MTUProbeInterval at the default interval), the first time that
	// long after it came up; idle gateways are checked MTUIdleFactor
	// times less often.
	MTUProbeFactor   = 50
	MTUProbeInterval = MTUProbeFactor * DefaultProbeInterval
	MTUIdleFactor    = 6
)

// mtuStep runs p's path MTU prober (probestate.PathMTU) and returns the size of
// an MTU probe to send now, 0 for none. Only a gateway that is up is
// checked; a change of its verdict is logged.
func (pr *prober) mtuStep(p *Peer, mono int64) int {
	m := &p.live.pmtu
	if !p.live.up() {
		m.Pause()
		return 0
	}
	iv := p.live.interval.Load()
	timeout := p.live.timeout() // its answer is refused after that
	// A degraded gateway gets no flows, so it looks idle; it is checked
	// at the full pace all the same, so its flows come back soon.
	every := MTUProbeFactor * iv
	if !p.live.active(mono) && !m.Degraded() {
		every *= MTUIdleFactor
	}
	size, changed := m.Step(mono, probestate.Sizes{Small: probeLen, Full: pr.r.set.mtu, Step: bhcrypto.PaddingMultiple}, p.live.acked.Load(), timeout, every)
	if changed && m.Degraded() {
		pr.r.log.Warn("gateway MTU-degraded: full-size probes go unanswered while small ones pass; its flows move to the site's other gateways",
			"site", p.site, "gateway", p.name, "endpoint", p.Endpoint(), "probe_bytes", pr.r.set.mtu)
	} else if changed {
		pr.r.log.Info("gateway carries full-size packets again", "site", p.site, "gateway", p.name, "path_mtu", pr.r.set.mtu)
	}
	return size
}

// controlBatch collects sealed control messages for many peers, to send
// in one system call where the bind can (see prober.send). Its buffers
// are allocated once (init) or when the peers outgrow them (grow, in the
// handshake loop only); one goroutine owns each batch.
type controlBatch struct {
	size  int      // bytes per buffer; 0: a small probe's
	bufs  [][]byte // one sealed-message buffer per slot
	out   [][]byte // the messages to send, in bufs
	eps   []netip.AddrPort
	peers []*Peer
	errs  []error // per message, what the bind refused it with (eachSender)
	// probes: the batch holds our probes (not replies), whose refusals
	// count per gateway (liveness.probeSendFails).
	probes bool
}

func (c *controlBatch) init(n int) {
	for range n {
		c.grow()
	}
	c.out, c.eps, c.peers = c.out[:0], c.eps[:0], c.peers[:0]
}

// grow adds a slot.
func (c *controlBatch) grow() {
	if c.size == 0 {
		c.bufs = append(c.bufs, probeScratch())
	} else {
		c.bufs = append(c.bufs, make([]byte, c.size))
	}
	c.out = slices.Grow(c.out, 1)
	c.eps = slices.Grow(c.eps, 1)
	c.peers = slices.Grow(c.peers, 1)
	c.errs = append(c.errs, nil)
}

// next returns the buffer of the next slot, or nil when all are in use.
func (c *controlBatch) next() []byte {
	if len(c.out) == len(c.bufs) {
		return nil
	}
	return c.bufs[len(c.out)]
}

func (c *controlBatch) add(msg []byte, ep netip.AddrPort, p *Peer) {
	c.out = append(c.out, msg)
	c.eps = append(c.eps, ep)
	c.peers = append(c.peers, p)
}

// manySender is a bind that sends datagrams to several endpoints in one
// call (udp.LinuxBind does, with one sendmmsg).
type manySender interface {
	SendMany(bufs [][]byte, eps []netip.AddrPort) error
}

// eachSender is a manySender that says which datagrams the kernel
// refused (udp.LinuxBind.SendManyEach, and transit.Bind around it): a
// refused destination (a prohibit or blackhole route, an unreachable
// network) costs its own messages only, and the others are known to
// have gone out.
type eachSender interface {
	SendManyEach(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, err error)
}

// send sends the batch's messages and empties it: in one call where
// the bind can, else one Send each. A message the kernel refuses is
// counted (drop reason send_error; for our probes also per gateway,
// bridgehead_peer_probes_total{result="send_failed"}) and costs no other
// gateway its probe. It allocates nothing.
func (pr *prober) send(c *controlBatch) {
	if len(c.out) == 0 {
		return
	}
	now := pr.r.mono.ns(pr.r.clock.Now())
	switch b := pr.r.bind.(type) {
	case eachSender:
		failed, err := b.SendManyEach(c.out, c.eps, c.errs)
		if err != nil {
			// Nothing was sent, or a system call failure stopped the
			// batch: which messages went out is unknown, so no
			// gateway is blamed.
			pr.r.drops.Add(Inside, ReasonSendError, uint64(len(c.out)))
			pr.r.log.Debug("control messages not sent", "count", len(c.out), "err", err)
			break
		}
		for i, p := range c.peers {
			if failed > 0 && c.errs[i] != nil {
				pr.failed(c, i)
				continue
			}
			p.lastSend.Store(now)
		}
		clear(c.errs[:len(c.out)])
	case manySender:
		if err := b.SendMany(c.out, c.eps); err != nil {
			// Which were refused is not known (a bind without
			// SendManyEach): the batch counts as failed, and no
			// gateway is blamed.
			pr.r.drops.Add(Inside, ReasonSendError, uint64(len(c.out)))
			pr.r.log.Debug("control messages not sent", "count", len(c.out), "err", err)
		} else {
			for _, p := range c.peers {
				p.lastSend.Store(now)
			}
		}
	default:
		for i := range c.out {
			if err := pr.r.bind.Send(c.out[i:i+1], c.eps[i]); err != nil {
				pr.failed(c, i)
				continue
			}
			c.peers[i].lastSend.Store(now)
		}
	}
	clear(c.out)
	clear(c.peers)
	c.out, c.eps, c.peers = c.out[:0], c.eps[:0], c.peers[:0]
}

// failed counts message i of c as refused: a send_error drop and, for
// our probes, a failed probe of its gateway.
func (pr *prober) failed(c *controlBatch, i int) {
	pr.r.drops.Add(Inside, ReasonSendError, 1)
	if c.probes {
		c.peers[i].live.probeSendFails.Add(1)
	}
}

// logChange notes a state change for the next log line (reachLog.flush
// writes the changes of one timers run together: a WAN cut takes hundreds
// of gateways down at once).
func (pr *prober) logChange(p *Peer, from LiveState, now time.Time) {
	switch to := p.live.State(); {
	case to == LiveDown && p.live.reason.Load() == uint32(DownDraining):
		pr.r.log.Info("gateway draining: it is shutting down, flows move to the site's other gateways",
			"site", p.site, "gateway", p.name, "endpoint", p.Endpoint())
	case to == LiveDown && p.live.reason.Load() == uint32(DownCannotDeliver):
		pr.r.log.Warn("gateway down: it reports that it cannot deliver to its site (its LAN side), flows move to the site's other gateways",
			"site", p.site, "gateway", p.name, "endpoint", p.Endpoint())
	case to == LiveDown:
		pr.r.hs.reach.down(p, time.Duration(pr.r.mono.ns(now)-p.live.acked.Load()),
			time.Duration(pr.r.mono.ns(now)-p.lastReceive.Load()), time.Duration(p.live.interval.Load()))
	case from == LiveDown:
		pr.r.hs.reach.upAgain = append(pr.r.hs.reach.upAgain, p)
	default:
		pr.r.hs.reach.up = append(pr.r.hs.reach.up, p)
	}
}
