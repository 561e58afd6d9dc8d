package router

import "time"

// Session lifecycle constants, the values trusted tunnels use.
const (
	// RekeyAfterTime: the initiator of a session starts a new handshake
	// when it sends on a session this old.
	RekeyAfterTime = 120 * time.Second
	// RejectAfterTime: sessions this old are not used in either direction.
	RejectAfterTime = 180 * time.Second
	// RekeyTimeout is the base handshake retransmission interval.
	RekeyTimeout = 5 * time.Second
	// RekeyJitter is the most random delay added to each retransmission.
	RekeyJitter = 333 * time.Millisecond
	// RekeyAttemptTime: handshake attempts stop after this long and the
	// queued packets are dropped.
	RekeyAttemptTime = 90 * time.Second
	// responderRekeyAfter: the responder rekeys later than the initiator
	// so that both sides do not start at once.
	responderRekeyAfter = RejectAfterTime - 15*time.Second
	// wipeAfter: a peer's current and previous sessions are forgotten
	// once current is this old (since its handshake), used or not.
	wipeAfter = 3 * RejectAfterTime
	// TimerTick is how often the handshake loop checks its timers.
	TimerTick = 250 * time.Millisecond
	// DropLogInterval is the most often drop summaries are logged.
	DropLogInterval = 10 * time.Second
	// KeepaliveTimeout: a peer that sent us data and heard nothing back
	// for this long gets an empty keepalive, so its "no answer" timer
	// does not fire on one-way traffic.
	KeepaliveTimeout = 10 * time.Second
	// InitiationRate and InitiationBurst pace this gateway's new
	// handshake attempts (retransmissions are not held back): a burst
	// stays under the handshake queue's load mark (an eighth of it,
	// 32 messages by default) so the responses are answered without a
	// cookie round, and 600 peers take about 1.5 s.
	InitiationRate  = 400
	InitiationBurst = 24
	// HandshakeRate and HandshakeBurst bound handshakes per source
	// (IPv4 address or IPv6 /64) while the handshake loop is under load.
	HandshakeRate  = 20
	HandshakeBurst = 5
	// limiterGCInterval is how often idle sources leave the rate
	// limiters' tables.
	limiterGCInterval = time.Second
	// UnderLoadHoldover: the handshake loop stays "under load" (cookies
	// required, sources rate limited) this long after its queue last
	// passed the mark, so that a flood in bursts does not switch the
	// defences off between bursts.
	UnderLoadHoldover = time.Second
	// InitiationInterval: an initiation from a peer sooner than this
	// after the last one accepted from it is dropped as a flood.
	InitiationInterval = 20 * time.Millisecond
	// maxConsecutiveErrors: a data loop whose device failed this many
	// reads in a row gives up and stops the router.
	maxConsecutiveErrors = 1000
	// ICMPRate and ICMPBurst bound the "too big" errors sent to each
	// local source.
	ICMPRate  = 10
	ICMPBurst = 10
)
