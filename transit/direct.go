package transit

import (
	"encoding/binary"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Direct paths between two spokes (doc.go, "Direct when the NATs
// allow"). Three messages travel as the datagram of a relay message; none
// is a Noise message type (1-4), and a hub forwards only those, so a
// spoke cannot make a hub pass one of these on as its own:
//
//	msgHint         hub -> spoke, in the hub's session with the spoke,
//	                KeyID = the other spoke:
//	                type | 0 0 0 | address (16, IPv4 mapped) | port (2)
//	msgProbe,       spoke -> spoke, straight to the other's mapping, in
//	msgProbeReply   their end-to-end session, KeyID = the sender:
//	                type | 0 0 0 | echo (8)
//
// While a hub relays for a pair of spokes it tells each the other's
// public address and port (HintInterval apart per pair). A spoke that
// knows a mapping for a gateway it reaches through a hub sends a probe
// there at most every DirectProbeInterval while it sends that gateway
// anything; each spoke's probes open its own NAT toward the other
// (simultaneous open). A reply that authenticates under the end-to-end
// session and answers a probe still in flight (its echo is the probe's
// send time: one sent since the newest answered, at most DirectTimeout
// ago) proves the path both ways (it came back the way it went), and
// from then on everything for that gateway goes straight to the address
// the reply came from, unwrapped, until a probe stays unanswered for
// DirectTimeout: then back to the hub until the next reply. As for the
// router's liveness, silence counts only while we send: an idle pair
// keeps its direct path, and the first probe after the pause tests it. Datagrams from that address reach the router as from
// the gateway's pseudo endpoint, so its session, roaming and probes see
// one gateway on one endpoint, whichever way the datagrams took.
const (
	msgHint       = 0x21
	msgProbe      = 0x22
	msgProbeReply = 0x23
	hintLen       = 22
	directLen     = 12

	// HintInterval is how often a hub tells a pair of spokes it relays
	// for each other's mapping.
	HintInterval = time.Second
	// DirectProbeInterval is how often a spoke probes a direct path
	// while it sends to the gateway at its end: the router's default
	// probe interval.
	DirectProbeInterval = 200 * time.Millisecond
	// DirectTimeout is how long a probe of a direct path in use may
	// stay unanswered before the hub takes over again: two probe
	// intervals (a direct round trip takes milliseconds), so with the
	// first unanswered probe up to one interval after the path broke,
	// datagrams go through the hub again within 600 ms, inside the 1 s
	// failover bound. Falling back for nothing costs only the hub's
	// detour until the next answer.
	DirectTimeout = 2 * DirectProbeInterval
)

// directState is what a spoke knows of the direct path to one gateway.
// Written by any lane's Bind (hints and replies by Receive, probes by
// the send side); atomics throughout.
type directState struct {
	// cand is the gateway's mapping: from a hub's hint, then the
	// address its authenticated direct messages came from.
	cand atomic.Pointer[netip.AddrPort]
	// acked is when (Relay.ns) a probe of ours was last answered from
	// cand; 0: never.
	acked atomic.Int64
	// probed is when we last sent a probe there, unanswered when the
	// oldest probe still in flight was (0: none is): the probes in
	// flight are those sent from unanswered to probed.
	probed, unanswered atomic.Int64
}

// answer reports whether a reply echoing echo, received at now, answers
// a probe in flight, and takes it (and any older one) out of flight if
// so: the echo is a probe's send time, so it must lie between
// unanswered and probed, at most DirectTimeout ago. A reply held back
// until the path was given up, a second answer to one probe or an answer
// to a probe never sent proves nothing about the path now, and would
// send datagrams straight into a dead one. The echo has always been the
// probe's send time, so the wire format is unchanged. Any Receive
// goroutine: of two answers to one probe at once, one counts.
func (d *directState) answer(echo, now int64) bool {
	for {
		oldest, newest := d.unanswered.Load(), d.probed.Load()
		if oldest == 0 || echo < oldest || echo > newest || now-echo > int64(DirectTimeout) {
			return false
		}
		var left int64 // none in flight
		if echo < newest {
			left = newest // the newest is still in flight
		}
		if d.unanswered.CompareAndSwap(oldest, left) {
			return true
		}
	}
}

// isNoise reports whether a relayed datagram is a message of the
// end-to-end protocol, the only ones a hub forwards.
func isNoise(inner []byte) bool {
	return len(inner) > 0 && inner[0] >= bhcrypto.MsgInitiation && inner[0] <= bhcrypto.MsgTransport
}

// ns is the Relay's clock as nanoseconds since it was made (never 0).
func (r *Relay) ns() int64 { return int64(r.now().Sub(r.epoch)) + 1 }

// setCandidate records addr as gateway gw's mapping.
func (v *view) setCandidate(gw GatewayID, addr netip.AddrPort) {
	if gw < 0 || int(gw) >= len(v.direct) || !addr.IsValid() {
		return
	}
	d := &v.direct[gw]
	if old := d.cand.Load(); old != nil && *old == addr {
		return
	}
	v.candMu.Lock()
	defer v.candMu.Unlock()
	d.cand.Store(&addr)
	v.indexCandidates()
}

// keepDirect copies old's direct state of every gateway that is in v's
// plan with the same key and site into v, which is not yet published,
// and indexes the candidates.
func (v *view) keepDirect(old *view) {
	kept := false
	for id := range v.direct {
		gw := v.plan.Gateway(GatewayID(id))
		was, ok := old.plan.ByKey(gw.Key)
		if !ok || old.plan.Gateway(was).Site != gw.Site || int(was) >= len(old.direct) {
			continue
		}
		from, to := &old.direct[was], &v.direct[id]
		c := from.cand.Load()
		if c == nil {
			continue
		}
		to.cand.Store(c)
		to.acked.Store(from.acked.Load())
		to.probed.Store(from.probed.Load())
		to.unanswered.Store(from.unanswered.Load())
		kept = true
	}
	if kept {
		v.indexCandidates()
	}
}

// indexCandidates publishes the map from candidate addresses to
// gateways. Callers hold candMu or own v alone.
func (v *view) indexCandidates() {
	m := make(map[netip.AddrPort]GatewayID, len(v.direct))
	for i := range v.direct {
		if c := v.direct[i].cand.Load(); c != nil {
			if _, taken := m[*c]; !taken {
				m[*c] = GatewayID(i)
			}
		}
	}
	v.cands.Store(&m)
}

// directTo returns where to send datagrams for gateway dst straight, if
// its direct path is in use.
func (b *Bind) directTo(v *view, dst GatewayID) (netip.AddrPort, bool) {
	if dst < 0 || int(dst) >= len(v.direct) {
		return netip.AddrPort{}, false
	}
	d := &v.direct[dst]
	c := d.cand.Load()
	if c == nil || d.acked.Load() == 0 {
		return netip.AddrPort{}, false
	}
	if u := d.unanswered.Load(); u != 0 && b.relay.ns()-u > int64(DirectTimeout) {
		return netip.AddrPort{}, false
	}
	return *c, true
}

// punch sends a direct probe to dst's mapping when one is known and the
// last probe is DirectProbeInterval old.
func (b *Bind) punch(v *view, dst GatewayID) {
	if dst < 0 || int(dst) >= len(v.direct) || v.self < 0 {
		return
	}
	d := &v.direct[dst]
	c := d.cand.Load()
	if c == nil {
		return
	}
	now, last := b.relay.ns(), d.probed.Load()
	if last != 0 && now-last < int64(DirectProbeInterval) || !d.probed.CompareAndSwap(last, now) {
		return
	}
	kp, _, ok := b.sess.table.CurrentSession(v.plan.Gateway(dst).Key)
	if !ok {
		return
	}
	if msg, ok := directMessage(kp, v.plan.KeyID(v.self), msgProbe, uint64(now)); ok {
		d.unanswered.CompareAndSwap(0, now)
		b.inner.Send([][]byte{msg}, *c)
	}
}

// directMessage seals a probe or reply in session kp.
func directMessage(kp *bhcrypto.Keypair, self bhcrypto.KeyID, typ byte, echo uint64) ([]byte, bool) {
	buf := make([]byte, bhcrypto.RelayOverhead+directLen)
	body := buf[bhcrypto.RelayHeaderSize:]
	body[0] = typ
	binary.BigEndian.PutUint64(body[4:12], echo)
	msg, err := kp.SealRelay(buf, directLen, self)
	return msg, err == nil
}

// hintMessage seals a hint for a spoke, in the hub's session kp with it,
// that gateway other is at addr.
func hintMessage(kp *bhcrypto.Keypair, other bhcrypto.KeyID, addr netip.AddrPort) ([]byte, bool) {
	buf := make([]byte, bhcrypto.RelayOverhead+hintLen)
	encodeHint(buf[bhcrypto.RelayHeaderSize:], addr)
	msg, err := kp.SealRelay(buf, hintLen, other)
	return msg, err == nil
}

// encodeHint writes a hint's body for addr into body[:hintLen].
func encodeHint(body []byte, addr netip.AddrPort) {
	body[0] = msgHint
	a := addr.Addr().As16()
	copy(body[4:20], a[:])
	binary.BigEndian.PutUint16(body[20:22], addr.Port())
}

// parseHint returns the address of a hint.
func parseHint(inner []byte) (netip.AddrPort, bool) {
	if len(inner) != hintLen || inner[0] != msgHint {
		return netip.AddrPort{}, false
	}
	a := netip.AddrFrom16([16]byte(inner[4:20])).Unmap()
	ap := netip.AddrPortFrom(a, binary.BigEndian.Uint16(inner[20:22]))
	if _, pseudo := PseudoGateway(ap); pseudo || !a.IsGlobalUnicast() && !a.IsPrivate() {
		return netip.AddrPort{}, false
	}
	return ap, true
}

// hint is a hub's side: after it forwarded a relay message from src (at
// srcAt) to dst (at dstAt), it tells each the other's address, at most
// every HintInterval per pair. The hints go out with the batch's
// forwards. Receive goroutine only.
func (b *Bind) hint(s *rxState, v *view, src, dst GatewayID, srcAt, dstAt netip.AddrPort) {
	if !srcAt.IsValid() || !dstAt.IsValid() {
		return
	}
	if s.hintedIn != v { // a new Plan: ids may name other gateways now
		clear(s.hinted)
		s.hintedIn = v
	}
	pair := [2]GatewayID{min(src, dst), max(src, dst)}
	now := b.relay.ns()
	if last, ok := s.hinted[pair]; ok && now-last < int64(HintInterval) {
		return
	}
	if s.hinted == nil {
		s.hinted = map[[2]GatewayID]int64{}
	}
	s.hinted[pair] = now
	for _, h := range []struct {
		to, other GatewayID
		at        netip.AddrPort
	}{{src, dst, dstAt}, {dst, src, srcAt}} {
		kp, to, ok := b.sess.Current(h.to)
		if !ok {
			continue
		}
		if msg, ok := hintMessage(kp, v.plan.KeyID(h.other), h.at); ok {
			s.fwdBufs, s.fwdEps = append(s.fwdBufs, msg), append(s.fwdEps, to)
		}
	}
}

// receiveDirect handles a direct probe or reply from gateway from, which
// arrived from addr. Receive goroutine only.
func (b *Bind) receiveDirect(s *rxState, v *view, from GatewayID, inner []byte, addr netip.AddrPort) {
	if len(inner) != directLen {
		return
	}
	switch inner[0] {
	case msgProbe:
		if !b.addrAllowed(v, from, addr) {
			b.relay.counts.add(ReasonHintRefused, 0)
			return
		}
		v.setCandidate(from, addr)
		kp, _, ok := b.sess.table.CurrentSession(v.plan.Gateway(from).Key)
		if !ok {
			return
		}
		if msg, ok := directMessage(kp, v.plan.KeyID(v.self), msgProbeReply, binary.BigEndian.Uint64(inner[4:12])); ok {
			s.fwdBufs, s.fwdEps = append(s.fwdBufs, msg), append(s.fwdEps, addr)
		}
	case msgProbeReply:
		d := &v.direct[from]
		now := b.relay.ns()
		if !d.answer(int64(binary.BigEndian.Uint64(inner[4:12])), now) {
			return // stale: proves nothing, not even the address
		}
		if !b.addrAllowed(v, from, addr) {
			b.relay.counts.add(ReasonHintRefused, 0)
			return
		}
		v.setCandidate(from, addr)
		d.acked.Store(now)
	}
}

// directFrom returns the gateway a datagram that came straight from addr
// is to be seen from (its pseudo endpoint), if any: only a transport
// message whose receiver index is our session with the very gateway
// whose mapping addr is, and one we reach through a hub. The address
// alone proves nothing (a hint may name any address, a sender may forge
// its source), so it never decides which gateway a datagram is from:
// the session does, and the router then authenticates the datagram with
// that session, dropping it if the tag fails. Handshake messages and
// other sessions' datagrams from addr reach the router as from addr,
// whose own rules apply to them. It allocates nothing.
func (b *Bind) directFrom(v *view, msg []byte, addr netip.AddrPort) (GatewayID, bool) {
	gw, ok := v.fromCandidate(addr)
	if !ok {
		return None, false
	}
	rcv, _, ok := bhcrypto.ParseTransportHeader(msg)
	if !ok {
		return None, false
	}
	if _, opened, ok := b.sess.Session(rcv); !ok || opened != gw || len(v.hubs[gw]) == 0 {
		return None, false
	}
	return gw, true
}

// hintAllowed reports whether a hint from hub gateway via that gateway
// named is at addr may be taken: via is one of the hub gateways we reach
// named through (so a hub speaks only for the pairs it relays, and only
// about gateways we reach through a hub at all), and addrAllowed.
func (b *Bind) hintAllowed(v *view, via, named GatewayID, addr netip.AddrPort) bool {
	if via < 0 || named < 0 || int(named) >= len(v.hubs) || !slices.Contains(v.hubs[named], via) {
		return false
	}
	return b.addrAllowed(v, named, addr)
}

// addrAllowed reports whether addr may become gateway gw's mapping: it is
// not our own address, nor the configured or current endpoint of any
// other gateway (a hint naming a directly reached peer's address would
// have us probe it and, before directFrom checked sessions, see its
// datagrams as gw's). Hints arrive at most every HintInterval per pair,
// so a walk over the catalog is cheap enough; an unchanged address skips
// it.
func (b *Bind) addrAllowed(v *view, gw GatewayID, addr netip.AddrPort) bool {
	if gw < 0 || int(gw) >= len(v.direct) {
		return false
	}
	if c := v.direct[gw].cand.Load(); c != nil && *c == addr {
		return true
	}
	if addr == b.inner.LocalAddr() {
		return false
	}
	for id := range v.plan.Len() {
		other := GatewayID(id)
		if other == gw || other == v.self {
			continue
		}
		g := v.plan.Gateway(other)
		if g.Endpoint.IsValid() && g.Endpoint == addr {
			return false
		}
		if _, to, ok := b.sess.table.CurrentSession(g.Key); ok && to == addr {
			return false
		}
	}
	return true
}

// fromCandidate returns the gateway whose mapping addr is, if any.
// It is on the receive path of every datagram once a hint arrived, so it
// is one map lookup, whatever the catalog's size.
func (v *view) fromCandidate(addr netip.AddrPort) (GatewayID, bool) {
	m := v.cands.Load()
	if m == nil {
		return None, false
	}
	gw, ok := (*m)[addr]
	if !ok {
		return None, false
	}
	return gw, true
}

// Direct reports whether the router's endpoint ep is a gateway reached
// through a hub whose direct path is in use now, and where it goes.
func (b *Bind) Direct(ep netip.AddrPort) (netip.AddrPort, bool) {
	dst, relayed := PseudoGateway(ep)
	v := b.relay.view.Load()
	if !relayed || v == nil {
		return netip.AddrPort{}, false
	}
	return b.directTo(v, dst)
}
