package transit

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Sessions is what the relay path needs of the router's sessions. Its
// methods are called from the router's receive loops, concurrently, and
// must not allocate.
type Sessions interface {
	// Session returns the keypair whose LocalIndex is index and the
	// gateway it is a session with.
	Session(index uint32) (kp *bhcrypto.Keypair, gw GatewayID, ok bool)
	// Current returns the keypair to send to gateway gw with and the
	// address to send to (its endpoint, or where it was last heard
	// from).
	Current(gw GatewayID) (kp *bhcrypto.Keypair, to netip.AddrPort, ok bool)
}

// Result is what became of a relay message.
type Result struct {
	// Out is the relay message to send, rewritten in place in the
	// buffer Forward was given, and To where to send it. Set only when
	// Reason is Forwarded.
	Out []byte
	To  netip.AddrPort
	// Inner is the relayed datagram (aliasing the message) when Reason
	// is Delivered, Origin the gateway that sealed it and Via the hub
	// gateway that passed it on (Receive only; None for a direct probe
	// or reply, which Origin sealed in its end-to-end session and sent
	// straight here).
	Inner       []byte
	Origin, Via GatewayID
	// Dst is the gateway a forwarded message went to (Forwarded only).
	Dst GatewayID
	// From is the gateway that sent it, once its tag has verified
	// (None before): the router notes it as traffic from that gateway,
	// which it follows to a new source address as for any datagram.
	From   GatewayID
	Reason Reason
}

// Relay is one gateway's relay path: Forward when it is a hub, Wrap and
// Unwrap when it is a spoke. Its methods are safe for concurrent use;
// SetPlan may run at any time (a reload), and each call sees one Plan.
type Relay struct {
	sessions Sessions
	view     atomic.Pointer[view]
	counts   Counts
	// now and epoch time the direct paths (direct.go); set by New,
	// read-only after.
	now   func() time.Time
	epoch time.Time
}

// view is a Plan and the local gateway in it, swapped together, with
// the hub gateways the local gateway relays through toward each
// gateway.
type view struct {
	plan *Plan
	self GatewayID
	hubs [][]GatewayID // by destination
	// direct is the direct path to each gateway (direct.go).
	direct []directState
	// noSession is, by destination, which of its hubs said they have
	// no session with it, until when (nosession.go).
	noSession []noSessionMarks
	// cands maps each gateway's candidate address (directState.cand) to
	// the gateway, for Receive's lookup of a datagram's source: nil
	// until one has a candidate. Copy on write by setCandidate, under
	// candMu (candidates change once per hint or roam, not per
	// datagram); readers load it.
	candMu sync.Mutex
	cands  atomic.Pointer[map[netip.AddrPort]GatewayID]
}

// New returns a Relay over the router's sessions and registers its
// metrics on reg (nil: none). It relays nothing until SetPlan. sessions
// may be nil when the Relay goes to NewBind, which sets them.
func New(sessions Sessions, reg prometheus.Registerer) (*Relay, error) {
	r := &Relay{sessions: sessions, now: time.Now}
	r.epoch = r.now()
	if reg != nil {
		if err := reg.Register(newCollector(&r.counts)); err != nil {
			return nil, err
		}
	}
	return r, nil
}

// SetPlan installs the catalog's Plan; self is the local gateway. The
// direct path to a gateway that keeps its key and site (a reload that
// leaves it alone) is kept, whatever its id in the new Plan: without
// that, every direct path would fall back to the hub until the next
// hint and probe answer. Probe answers and hints that land on the old
// view while SetPlan copies it are lost; the next probe repeats them.
func (r *Relay) SetPlan(p *Plan, self GatewayID) {
	v := &view{plan: p, self: self, hubs: make([][]GatewayID, p.Len()), direct: make([]directState, p.Len())}
	v.noSession = make([]noSessionMarks, p.Len())
	for dst := range v.hubs {
		v.hubs[dst] = p.Hubs(self, GatewayID(dst))
		if len(v.hubs[dst]) > 0 {
			v.noSession[dst] = make(noSessionMarks, len(v.hubs[dst]))
		}
	}
	if old := r.view.Load(); old != nil {
		v.keepDirect(old)
	}
	r.view.Store(v)
}

// Plan returns the current Plan and the local gateway (nil, None before
// SetPlan).
func (r *Relay) Plan() (*Plan, GatewayID) {
	v := r.view.Load()
	if v == nil {
		return nil, None
	}
	return v.plan, v.self
}

// Counts returns the relay's counters.
func (r *Relay) Counts() *Counts { return &r.counts }

// open authenticates a relay message received on one of our sessions and
// finds the gateway its KeyID names. It checks the replay window.
func (r *Relay) open(v *view, msg []byte) (inner []byte, via, peer GatewayID, reason Reason) {
	rcv, _, _, ok := bhcrypto.ParseRelayHeader(msg)
	if !ok {
		return nil, None, None, ReasonMalformed
	}
	kp, via, ok := r.sessions.Session(rcv)
	if !ok {
		return nil, None, None, ReasonUnknownIndex
	}
	inner, key, ctr, err := kp.OpenRelay(msg)
	if err != nil {
		return nil, None, None, ReasonBadTag
	}
	if !kp.CheckReplay(ctr) {
		return nil, None, None, ReasonReplay
	}
	peer, ok = v.plan.Lookup(key)
	if !ok {
		return nil, via, None, ReasonUnknownGateway
	}
	return inner, via, peer, Delivered
}

// Forward is a hub's forward path. msg is a relay message as received,
// from a spoke; on success it is rewritten in place for the destination
// (same length) and returned in Result.Out. The relayed datagram is not
// read, copied or moved. It does not allocate.
func (r *Relay) Forward(msg []byte) Result {
	res := r.forward(msg)
	r.counts.add(res.Reason, len(msg)-bhcrypto.RelayOverhead)
	return res
}

func (r *Relay) forward(msg []byte) Result {
	v := r.view.Load()
	if v == nil {
		return Result{From: None, Reason: ReasonNotAllowed}
	}
	inner, src, dst, reason := r.open(v, msg)
	if reason != Delivered {
		return Result{From: src, Reason: reason}
	}
	if !v.plan.Allowed(v.self, src, dst) {
		return Result{From: src, Reason: ReasonNotAllowed}
	}
	if !isNoise(inner) {
		return Result{From: src, Reason: ReasonMalformed}
	}
	kp, to, ok := r.sessions.Current(dst)
	if !ok {
		return Result{From: src, Reason: ReasonNoSession}
	}
	out, err := kp.SealRelay(msg, len(inner), v.plan.KeyID(src))
	if err != nil {
		return Result{From: src, Reason: ReasonSealFailed}
	}
	return Result{Out: out, To: to, From: src, Reason: Forwarded}
}

// Receive handles any relay message: a hub's (Forward) when the local
// gateway may relay from its sender to the gateway it names, a spoke's
// (Unwrap) when the sender is a hub of the named gateway's site and the
// message is for the local gateway. The two never apply to the same
// message: a hub's site is neither the source's nor the destination's.
// The message is authenticated once. It does not allocate.
func (r *Relay) Receive(msg []byte) Result {
	v := r.view.Load()
	if v == nil {
		r.counts.add(ReasonNotAllowed, 0)
		return Result{From: None, Origin: None, Via: None, Reason: ReasonNotAllowed}
	}
	inner, sender, named, reason := r.open(v, msg)
	res := Result{From: sender, Origin: None, Via: None, Dst: None, Reason: reason}
	switch {
	case reason != Delivered:
	case v.plan.Allowed(v.self, sender, named):
		if !isNoise(inner) {
			res.Reason = ReasonMalformed // a hub passes on only the end-to-end protocol's messages
			break
		}
		kp, to, ok := r.sessions.Current(named)
		if !ok {
			res.Reason, res.Dst = ReasonNoSession, named
			break
		}
		out, err := kp.SealRelay(msg, len(inner), v.plan.KeyID(sender))
		if err != nil {
			res.Reason = ReasonSealFailed
			break
		}
		res.Out, res.To, res.Dst, res.Reason = out, to, named, Forwarded
	case named != v.self && v.plan.Allowed(sender, named, v.self):
		res.Inner, res.Origin, res.Via = inner, named, sender
		if !isNoise(inner) {
			res.Reason = Control // the hub's own hint about named
		}
	case sender == named && named != v.self && len(v.hubs[sender]) > 0 && !isNoise(inner):
		// A direct probe or reply of a gateway reached through a hub,
		// sealed in our end-to-end session with it.
		res.Inner, res.Origin, res.Reason = inner, sender, Control
	default:
		res.Reason = ReasonNotAllowed
	}
	r.counts.add(res.Reason, len(inner))
	return res
}

// Wrap is a spoke's send side: pkt[bhcrypto.RelayHeaderSize:][:innerLen]
// is a datagram sealed for gateway dst, to go through the hub gateway
// whose session is hub. It returns the relay message (see
// Keypair.SealRelay for the buffer rules). It does not allocate.
func (r *Relay) Wrap(pkt []byte, innerLen int, hub *bhcrypto.Keypair, dst GatewayID) ([]byte, error) {
	v := r.view.Load()
	if v == nil || dst < 0 || int(dst) >= v.plan.Len() {
		return nil, errNoGateway
	}
	return hub.SealRelay(pkt, innerLen, v.plan.KeyID(dst))
}

// Unwrap is a spoke's receive side: it authenticates a relay message that
// came from a hub and returns the datagram it carries, the gateway that
// sent it (from) and the hub gateway that passed it on (via). The
// datagram is the router's to process as if it came from `from`; once it
// has opened it, CheckOrigin must confirm that its session is with
// `from`. It does not allocate.
func (r *Relay) Unwrap(msg []byte) (inner []byte, from, via GatewayID, reason Reason) {
	v := r.view.Load()
	if v == nil {
		r.counts.add(ReasonNotAllowed, 0)
		return nil, None, None, ReasonNotAllowed
	}
	inner, via, from, reason = r.open(v, msg)
	if reason == Delivered && (from == v.self || !v.plan.Allowed(via, from, v.self)) {
		reason = ReasonNotAllowed
	}
	r.counts.add(reason, len(inner))
	if reason != Delivered {
		return nil, None, via, reason
	}
	return inner, from, via, Delivered
}

// CheckOrigin reports whether a relayed datagram that Unwrap said came
// from `named` was opened by the session with gateway `opened`, and
// counts a mismatch (ReasonOriginMismatch): a hub naming another source
// than the one that sealed the datagram is lying or broken.
func (r *Relay) CheckOrigin(named, opened GatewayID) bool {
	if named == opened {
		return true
	}
	r.counts.add(ReasonOriginMismatch, 0)
	return false
}

type errorString string

func (e errorString) Error() string { return string(e) }

const errNoGateway = errorString("transit: no such gateway in the plan")
