package transit

import (
	"slices"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// A hub gateway without a session to the destination. A spoke spreads
// its relayed flows toward a gateway over every hub gateway it may use
// (spread.go), but the router's probes of that gateway go through one of
// them (flow 0), so liveness tests one path. A hub gateway that has no
// session with the destination (it restarted and the destination has
// not handshaken again, or their handshakes fail) would drop its share
// of the flows, silently, for as long as it lasted. So the hub says so:
// a relay message it cannot forward for want of a session (no_session)
// earns the sender, at most every NoSessionInterval per pair and
// receiving goroutine, a message in the hub's session with it, naming
// the destination by KeyID:
//
//	msgNoSession   hub -> spoke: type | 0 0 0
//
// The spoke takes it only from a hub gateway it uses toward that
// destination, and then sends nothing for the destination through that
// hub gateway for NoSessionHold while another one has a session (it
// ranks below every other; candidates), so only that hub gateway's share
// of the flows moves, within one round trip to the hub. After the hold
// the flows go back to it, and a hub still without a session says so
// again. A hub can only steer flows off itself this way, which it could
// do anyway by dropping them.
const (
	msgNoSession = 0x24
	noSessionLen = 4

	// NoSessionInterval is how often a hub gateway tells a sender
	// that it has no session with the destination, per pair.
	NoSessionInterval = 200 * time.Millisecond
	// NoSessionHold is how long a spoke keeps a destination's flows
	// off a hub gateway that said it has no session with it.
	NoSessionHold = time.Second
)

// noSessionMessage seals a no-session signal for a spoke, in the hub's
// session kp with it, about gateway dst.
func noSessionMessage(kp *bhcrypto.Keypair, dst bhcrypto.KeyID) ([]byte, bool) {
	buf := make([]byte, bhcrypto.RelayOverhead+noSessionLen)
	buf[bhcrypto.RelayHeaderSize] = msgNoSession
	msg, err := kp.SealRelay(buf, noSessionLen, dst)
	return msg, err == nil
}

// isNoSession reports whether a hub's control message is a no-session
// signal.
func isNoSession(inner []byte) bool {
	return len(inner) == noSessionLen && inner[0] == msgNoSession && inner[1] == 0 && inner[2] == 0 && inner[3] == 0
}

// signalNoSession is a hub's side: a relay message from src for dst was
// dropped for want of a session with dst. It tells src, at most every
// NoSessionInterval per pair, with the batch's forwards. Receive
// goroutine only.
func (b *Bind) signalNoSession(s *rxState, v *view, src, dst GatewayID) {
	if src < 0 || dst < 0 {
		return
	}
	if s.signalledIn != v { // a new Plan: ids may name other gateways now
		clear(s.signalled)
		s.signalledIn = v
	}
	pair := [2]GatewayID{src, dst}
	now := b.relay.ns()
	if last, ok := s.signalled[pair]; ok && now-last < int64(NoSessionInterval) {
		return
	}
	kp, to, ok := b.sess.Current(src)
	if !ok {
		return
	}
	if s.signalled == nil {
		s.signalled = map[[2]GatewayID]int64{}
	}
	s.signalled[pair] = now
	if msg, ok := noSessionMessage(kp, v.plan.KeyID(dst)); ok {
		s.fwdBufs, s.fwdEps = append(s.fwdBufs, msg), append(s.fwdEps, to)
	}
}

// takeNoSession is a spoke's side: hub gateway via says it has no
// session with dst. It is taken only from a hub gateway we use toward
// dst. Any Receive goroutine.
func (b *Bind) takeNoSession(v *view, via, dst GatewayID) bool {
	if dst < 0 || int(dst) >= len(v.hubs) {
		return false
	}
	i := slices.Index(v.hubs[dst], via)
	if i < 0 {
		return false
	}
	v.noSession[dst][i].Store(b.relay.ns() + int64(NoSessionHold))
	return true
}

// noSessionMarks are, for one destination, until when (Relay.ns) each of
// its hub gateways (view.hubs) said it had no session with it; 0: never.
type noSessionMarks []atomic.Int64
