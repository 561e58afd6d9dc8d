package router

import (
	"net/netip"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/setupqueue"
)

// PeerConfig describes one remote gateway.
type PeerConfig struct {
	Site      string
	Name      string
	PublicKey bhcrypto.PublicKey
	Endpoint  netip.AddrPort
	// Keepalive is the interval of keepalive messages that keep NAT
	// mappings open and prove the peer alive; zero turns them off.
	Keepalive time.Duration
	// ProbeInterval is how long the gateway may stay silent before it is
	// probed; ProbeMisses intervals of silence mark it down. Zero means
	// DefaultProbeInterval; values are clamped to [MinProbeInterval,
	// MaxProbeInterval].
	ProbeInterval time.Duration
	// PreviousPublicKey, when set, is the gateway's key before a
	// rollover: handshakes it makes with it are accepted until
	// PreviousUntil (keys.go). A reload that names a peer's current key
	// as its PreviousPublicKey keeps the peer and its sessions.
	PreviousPublicKey bhcrypto.PublicKey
	PreviousUntil     time.Time
	// PresharedKeys are the site pair's preshared keys (at most
	// bhcrypto.MaxPresharedKeys): the first answers its handshakes, each
	// is tried on the responses to ours. None means plain IK.
	PresharedKeys []bhcrypto.PresharedKey
}

// Peer is a remote gateway and its sessions.
//
// A Peer outlives reloads as long as its site, name and public key stay the
// same, so its sessions survive a config change. Any goroutine may read
// any field; the comment beside each names who writes it. "Handshake
// loop" also covers its timers; "outside loop" is the UDP receive path;
// "inside path" is the TUN reader and sealer.
type Peer struct {
	site string // set by newPeer, never changed
	name string // set by newPeer, never changed
	// keys are the peer's static keys, preshared keys and cookie jar
	// (keys.go): replaced whole by SetConfig (a key rollover keeps the
	// Peer), read by the handshake loop and status.
	keys atomic.Pointer[peerKeys]
	// rank is the peer's key in rendezvous hashing (site.pick), from its
	// current public key, so every sender ranks a site's gateways alike.
	// Set by newPeer and, with keys, by a rollover.
	rank atomic.Uint64

	// live is the gateway's health: the one state the flow selector,
	// metrics, status and readiness read. Its own comment names the
	// writers of each field.
	live liveness

	// endpoint is where datagrams for the peer go. Written by the
	// outside loop (an authenticated packet from a new address), the
	// handshake loop (a handshake from a new address) and SetConfig
	// (the config moved the peer); the last write wins, which is what
	// roaming wants.
	endpoint atomic.Pointer[netip.AddrPort]
	// configEndpoint is the endpoint the config names. A reload that
	// changes it moves the peer; one that keeps it leaves a roamed
	// endpoint alone. Written by SetConfig only.
	configEndpoint atomic.Pointer[netip.AddrPort]
	// removed is set once by SetConfig when a reload drops the peer.
	removed atomic.Bool

	// Handshakes with this peer: initiations we sent, initiations we
	// answered, sessions completed either way, and failures (responses
	// that did not verify, attempts that gave up). Added to by the
	// handshake loop, and hsCompleted also by the outside loop
	// (confirm).
	hsInitiated, hsAnswered, hsCompleted, hsFailed atomic.Uint64
	// hsSendFailed counts handshake messages to the peer that could not
	// be sent (no route, for one). Handshake loop.
	hsSendFailed atomic.Uint64

	// keypairs holds current, previous and next; only its methods
	// write them, under its lock (see keypairs).
	keypairs

	// wantHandshake is set by the data path and cleared by the handshake
	// loop; it keeps the trigger channel from filling with duplicates.
	wantHandshake atomic.Bool
	// handshaking is set while an initiation of ours is pending
	// (p.hs.pending != nil): written by the handshake loop, read by the
	// data path, which then does not ask for another one. Without it a
	// session due for rekeying woke the loop once per packet until the
	// response came: up to 60 s toward a silent peer.
	handshaking atomic.Bool

	queue setupqueue.Queue // safe for concurrent use (see package setupqueue)

	// laneSession is laneTag of the session on which the peer last said
	// it reads lane bytes (flagLanes in a control message), 0 if none:
	// the inside path sets a lane byte only on that session (laneByte).
	// Written by the outside loops (handleControl), only when it changes
	// and only from a message on the current session.
	laneSession atomic.Uint64
	// expressSession is laneTag of the session on which the peer last
	// said it has an express lane (flagExpress), 0 if none: the inside
	// path sends sparse flows on it only on that session. Written like
	// laneSession.
	expressSession atomic.Uint64

	// Traffic counters: tx by the inside path and the handshake loop
	// (queued packets it flushes), rx by the outside loop.
	txPackets, txBytes atomic.Uint64
	rxPackets, rxBytes atomic.Uint64
	// The time stamps below are monotonic nanoseconds (see monoEpoch;
	// 0 = never).
	//
	// lastHandshake is when the last handshake completed: written by the
	// handshake loop (as initiator) and the outside loop (confirming as
	// responder).
	lastHandshake atomic.Int64
	// lastReceive is when the peer was last heard from: written by the
	// outside loop (authenticated packets) and the handshake loop
	// (handshakes).
	lastReceive atomic.Int64
	// lastSend is when we last sent to the peer: written by the inside
	// path and the handshake loop (queued packets, keepalives).
	lastSend atomic.Int64
	// mono converts the time stamps above back to times. Set by
	// newPeer, never changed.
	mono monoEpoch
	// keepalive is the keepalive interval in nanoseconds, 0 = off.
	// Written by SetConfig only.
	keepalive atomic.Int64

	// keyChanged is set by SetConfig when the peer's current key
	// changed (a rollover) and cleared by the handshake loop, which then
	// starts a handshake to the new key at once (hstimers.go).
	keyChanged atomic.Bool

	// Handshakes with or to a previous key (ours or the peer's) during
	// an overlap, handshakes completed with the pair's second preshared
	// key, and preshared-key mismatches. Handshake loop.
	hsPreviousKey, hsSecondPSK, hsPSKMismatch atomic.Uint64

	// Owned by the handshake loop.
	hs peerHandshake
}

// peerHandshake is the handshake loop's private state of one peer.
type peerHandshake struct {
	pending        *bhcrypto.Initiation
	pendingIndex   uint32
	firstAttempt   time.Time // start of the current attempt series
	lastSent       time.Time
	retryAfter     time.Duration
	lastTimestamp  bhcrypto.Timestamp // newest initiation timestamp accepted from the peer
	lastInitiation time.Time          // when we accepted it
	// noSession is since when the peer has had no usable session (zero
	// while it has one), for the proactive handshake's tie-break.
	noSession time.Time
	// reached: a handshake with the peer completed (either way) since
	// this Router started. Until then the tie-break does not apply.
	reached bool
	// laneAsked is laneTag of the last session on which the prober
	// sent a probe to learn whether the peer reads lane bytes.
	laneAsked uint64
	// responseFailures counts the responses for pendingIndex that
	// failed (handshake.go, maxResponseFailures).
	responseFailures int
	// lastKeyLog is when each kind of key problem with the peer was
	// last logged (keys.go, noteKeyProblem): expired keys, preshared
	// keys.
	lastKeyLog [2]time.Time
}

func newPeer(c PeerConfig, queueLen, slotSize int, now func() time.Time, mono monoEpoch) *Peer {
	p := &Peer{site: c.Site, name: c.Name, mono: mono}
	p.setKeys(c, nil, now)
	p.live.init(c.ProbeInterval)
	p.keepalive.Store(int64(c.Keepalive))
	ep := c.Endpoint
	p.endpoint.Store(&ep)
	p.configEndpoint.Store(&ep)
	p.queue.Init(queueLen, slotSize)
	return p
}

// Site is the name of the peer's site.
func (p *Peer) Site() string { return p.site }

// Name is the gateway name.
func (p *Peer) Name() string { return p.name }

// PublicKey is the peer's current static key (zero for a Peer built
// without newPeer, as tests do).
func (p *Peer) PublicKey() bhcrypto.PublicKey {
	if k := p.keys.Load(); k != nil {
		return k.cur
	}
	return bhcrypto.PublicKey{}
}

// Endpoint is where datagrams for the peer go: from config, or where the
// peer's last authenticated packet came from.
func (p *Peer) Endpoint() netip.AddrPort { return *p.endpoint.Load() }

// PeerStats is a snapshot of a peer's counters.
type PeerStats struct {
	Site, Name         string
	Endpoint           netip.AddrPort
	TxPackets, TxBytes uint64
	RxPackets, RxBytes uint64
	LastHandshake      time.Time // zero if none
	LastReceive        time.Time // zero if none
	SessionCreated     time.Time // zero without a current session
	QueuedPackets      int
	Keepalive          time.Duration
	// Down is set while the peer is reported not answering (Live.State
	// is LiveDown).
	Down bool
	// Live is the gateway's health: state, probes, last change.
	Live LivenessStats
	// Handshakes with this peer.
	HandshakesInitiated, HandshakesAnswered, HandshakesCompleted, HandshakesFailed uint64
	// HandshakeSendErrors counts handshake messages that could not be
	// sent to the peer.
	HandshakeSendErrors uint64
	// HandshakesPreviousKey counts handshakes made with the peer's
	// previous key or to ours during a key overlap;
	// HandshakesSecondPSK those completed with the pair's second
	// preshared key; PSKMismatches the ones refused or failed for a
	// preshared key that differs (keys.go).
	HandshakesPreviousKey, HandshakesSecondPSK, PSKMismatches uint64
	// PreviousKeyUntil is when the peer's previous key stops being
	// accepted; zero outside a rollover.
	PreviousKeyUntil time.Time
	// LaneBytes and Express say what the peer told us about the session
	// in use (its control messages on it): it reads lane bytes, so our
	// flows spread over its lanes' sockets; it has an express lane, so
	// sparse flows go there. Both are false until the first probe on a
	// new session is answered, and stay false toward a gateway that
	// predates them.
	LaneBytes, Express bool
}

// Stats returns a snapshot of the peer's counters.
func (p *Peer) Stats() PeerStats {
	s := PeerStats{
		Site: p.site, Name: p.name, Endpoint: p.Endpoint(),
		TxPackets: p.txPackets.Load(), TxBytes: p.txBytes.Load(),
		RxPackets: p.rxPackets.Load(), RxBytes: p.rxBytes.Load(),
		LastHandshake: p.mono.time(p.lastHandshake.Load()),
		LastReceive:   p.mono.time(p.lastReceive.Load()),
		QueuedPackets: p.queue.Len(),
		Keepalive:     time.Duration(p.keepalive.Load()),
		Live:          p.live.stats(p.mono),

		HandshakesInitiated: p.hsInitiated.Load(),
		HandshakesAnswered:  p.hsAnswered.Load(),
		HandshakesCompleted: p.hsCompleted.Load(),
		HandshakesFailed:    p.hsFailed.Load(),
		HandshakeSendErrors: p.hsSendFailed.Load(),

		HandshakesPreviousKey: p.hsPreviousKey.Load(),
		HandshakesSecondPSK:   p.hsSecondPSK.Load(),
		PSKMismatches:         p.hsPSKMismatch.Load(),
	}
	if k := p.keys.Load(); k != nil && !k.prev.IsZero() {
		s.PreviousKeyUntil = k.prevUntil
	}
	s.Down = s.Live.State == LiveDown
	if kp := p.current.Load(); kp != nil {
		s.SessionCreated = kp.Created
		s.LaneBytes = p.laneSession.Load() == laneTag(kp)
		s.Express = p.expressSession.Load() == laneTag(kp)
	}
	return s
}

// setConfigEndpoint applies the endpoint of a reloaded config: it moves the
// peer only if the configured endpoint changed.
func (p *Peer) setConfigEndpoint(ep netip.AddrPort) {
	if old := p.configEndpoint.Load(); old != nil && *old == ep {
		return
	}
	p.configEndpoint.Store(&ep)
	p.endpoint.Store(&ep)
}
