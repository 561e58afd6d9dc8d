package crypto

import (
	cryptorand "crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"fmt"
	"io"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
)

// Sentinel errors of the cookie mechanism. Like the others they are
// constants of type Error; some are returned wrapped with detail, so
// compare with errors.Is.
const (
	// ErrCookie: a cookie reply failed authentication, does not answer
	// the handshake message we sent last, or was already consumed. Also
	// wraps the (FIPS 140-only mode) failure to set up XChaCha20-Poly1305.
	ErrCookie Error = "crypto: invalid cookie reply"
	// ErrAddress: the source address is not a valid IP address.
	ErrAddress Error = "crypto: invalid source address"
	// ErrRandom: the random source failed; returned wrapped with the
	// reader's error.
	ErrRandom Error = "crypto: random source failed"
)

const (
	// cookieLabel prefixes the public key when deriving the key that
	// encrypts cookies in cookie replies.
	cookieLabel = "cookie--"

	// cookieSecretLifetime is how often a CookieChecker replaces its
	// secret. Cookies made with the current or the previous secret are
	// accepted, so a cookie stays valid for at least this long and at
	// most twice this long after it was issued.
	cookieSecretLifetime = 120 * time.Second

	// cookieJarLifetime is how long a CookieJar uses a cookie. It is a
	// little shorter than cookieSecretLifetime so that clock and network
	// delays do not make us send mac2 values the responder rejects.
	cookieJarLifetime = cookieSecretLifetime - 5*time.Second
)

// cookieKey returns BLAKE2s-256("cookie--" || pub), the XChaCha20-Poly1305
// key of cookie replies sent by the owner of pub. The checker derives it
// from its own public key, the jar from the peer's.
func cookieKey(pub PublicKey) [blake2s.Size]byte {
	var in [len(cookieLabel) + KeySize]byte
	copy(in[:], cookieLabel)
	copy(in[len(cookieLabel):], pub[:])
	return blake2s.Sum256(in[:])
}

// mac128 writes keyed BLAKE2s-128 of data into out. key must be 1 to 32
// bytes long; with any other length out is zeroed, which never matches a
// real MAC.
func mac128(out *[macSize]byte, key, data []byte) {
	h, err := blake2s.New128(key)
	if err != nil {
		clear(out[:])
		return
	}
	h.Write(data)
	h.Sum(out[:0])
}

// handshakeMAC1 validates that msg looks like an initiation or a response
// (size, type, reserved bytes; no cryptography) and returns its mac1
// field.
func handshakeMAC1(msg []byte) ([]byte, error) {
	var typ byte
	switch len(msg) {
	case InitiationSize:
		typ = MsgInitiation
	case ResponseSize:
		typ = MsgResponse
	default:
		return nil, ErrMessageSize
	}
	check := checkHeader
	if typ == MsgInitiation {
		check = func(b []byte, _ byte) error { return checkInitiationHeader(b) }
	}
	if err := check(msg, typ); err != nil {
		return nil, err
	}
	return msg[len(msg)-2*macSize : len(msg)-macSize], nil
}

// CookieChecker is the responder side of the cookie mechanism. When a node
// is under load it stops running Diffie-Hellman for handshake messages
// whose mac2 does not verify (CheckMAC2) and answers them with a cookie
// reply (CreateReply) instead. Only a sender that receives traffic at its
// claimed source address can learn the cookie and produce a valid mac2,
// so spoofed floods cost the node one hash each and no DH.
//
// A cookie is BLAKE2s-128 keyed by a random 32-byte secret over the
// source IP address (4 bytes for IPv4 and IPv4-mapped IPv6, 16 for IPv6;
// zone ignored) and port (2 bytes, little endian). The secret is replaced
// every 120 s; cookies made with the current or the previous secret are
// accepted, so a cookie is good for between 120 s and 240 s after it was
// issued. The secret is created on first use.
//
// A CookieChecker is safe for concurrent use by multiple goroutines.
type CookieChecker struct {
	key  [blake2s.Size]byte // reply encryption key; read-only
	rand io.Reader          // read-only
	now  func() time.Time   // read-only

	mu         sync.Mutex
	secret     [blake2s.Size]byte
	prev       [blake2s.Size]byte
	born       time.Time // when secret became current
	haveSecret bool
	havePrev   bool
}

// NewCookieChecker returns a CookieChecker for the node whose static public
// key is local. rand supplies the secrets and reply nonces (nil means
// crypto/rand.Reader) and must be safe for concurrent use if the checker
// is shared; now is the clock (nil means time.Now).
func NewCookieChecker(local PublicKey, rand io.Reader, now func() time.Time) *CookieChecker {
	if rand == nil {
		rand = cryptorand.Reader
	}
	if now == nil {
		now = time.Now
	}
	return &CookieChecker{key: cookieKey(local), rand: rand, now: now}
}

// secrets returns the current secret and, if it is still accepted, the
// previous one, rotating them first if due. If the random source fails,
// the state is left unchanged and an error is returned; stale secrets are
// never returned.
func (c *CookieChecker) secrets() (cur, prev [blake2s.Size]byte, havePrev bool, err error) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	age := now.Sub(c.born)
	if !c.haveSecret || age < 0 || age >= cookieSecretLifetime {
		var fresh [blake2s.Size]byte
		if _, err := io.ReadFull(c.rand, fresh[:]); err != nil {
			return cur, prev, false, fmt.Errorf("%w: cookie secret: %w", ErrRandom, err)
		}
		if c.haveSecret && age >= cookieSecretLifetime && age < 2*cookieSecretLifetime {
			// One period elapsed: the current secret becomes the
			// previous one. Keep the schedule aligned to the first
			// secret so no secret lives longer than two periods.
			c.prev = c.secret
			c.havePrev = true
			c.born = c.born.Add(cookieSecretLifetime)
		} else {
			// First use, a long idle gap, or a clock that went
			// backwards: start over without a previous secret.
			clear(c.prev[:])
			c.havePrev = false
			c.born = now
		}
		c.secret = fresh
		c.haveSecret = true
	}
	return c.secret, c.prev, c.havePrev, nil
}

// makeCookie computes the cookie for src under secret.
func makeCookie(out *[cookieSize]byte, secret *[blake2s.Size]byte, src netip.AddrPort) {
	var in [16 + 2]byte
	n := 16
	if a := src.Addr().Unmap(); a.Is4() {
		a4 := a.As4()
		n = copy(in[:], a4[:])
	} else {
		a16 := a.As16()
		copy(in[:], a16[:])
	}
	binary.LittleEndian.PutUint16(in[n:], src.Port())
	mac128(out, secret[:], in[:n+2])
}

// CheckMAC2 reports whether msg, an initiation or a response whose mac1
// the caller already verified, carries a mac2 made with a cookie this
// checker issued to src within the last 120 s (up to 240 s; see
// CookieChecker). It returns false for anything else, including messages
// of the wrong size or type, an invalid src, and a failing random source.
// msg is only read.
func (c *CookieChecker) CheckMAC2(msg []byte, src netip.AddrPort) bool {
	if _, err := handshakeMAC1(msg); err != nil || !src.Addr().IsValid() {
		return false
	}
	cur, prev, havePrev, err := c.secrets()
	if err != nil {
		return false
	}
	defer clear(cur[:])
	defer clear(prev[:])
	covered, got := msg[:len(msg)-macSize], msg[len(msg)-macSize:]
	var cookie [cookieSize]byte
	var want [macSize]byte
	defer clear(cookie[:])
	makeCookie(&cookie, &cur, src)
	mac128(&want, cookie[:], covered)
	if subtle.ConstantTimeCompare(want[:], got) == 1 {
		return true
	}
	if !havePrev {
		return false
	}
	makeCookie(&cookie, &prev, src)
	mac128(&want, cookie[:], covered)
	return subtle.ConstantTimeCompare(want[:], got) == 1
}

// CreateReply builds a CookieReplySize-byte cookie reply to msg, an
// initiation or a response received from src. The reply's receiver index
// is msg's sender index (bytes [4:8]) so the recipient can find its
// handshake state; the cookie for src is encrypted with
// XChaCha20-Poly1305 under BLAKE2s-256("cookie--" || local public key)
// with a random 24-byte nonce and msg's mac1 as associated data, so only
// the party that sent msg (and knows which mac1 it sent) can use the
// reply.
//
// CreateReply does not verify mac1; the caller must have done so. It
// checks msg's size, type and reserved bytes (ErrMessageSize,
// ErrMessageType, ErrReserved) and src (ErrAddress); a failing random
// source gives ErrRandom. The reply is never larger than msg. msg is only
// read; the caller owns the returned slice.
func (c *CookieChecker) CreateReply(msg []byte, src netip.AddrPort) ([]byte, error) {
	return c.createReply(msg, src, &c.key)
}

// CreateReplyAs is CreateReply for a message addressed to local, another
// static key of this node (the previous one of a KeyRing): the sender
// decrypts the reply with the key it addressed. It derives that key's
// reply key per call (one BLAKE2s pass).
func (c *CookieChecker) CreateReplyAs(msg []byte, src netip.AddrPort, local PublicKey) ([]byte, error) {
	key := cookieKey(local)
	return c.createReply(msg, src, &key)
}

func (c *CookieChecker) createReply(msg []byte, src netip.AddrPort, key *[blake2s.Size]byte) ([]byte, error) {
	mac1, err := handshakeMAC1(msg)
	if err != nil {
		return nil, err
	}
	if !src.Addr().IsValid() {
		return nil, ErrAddress
	}
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrCookie, err)
	}
	cur, _, _, err := c.secrets()
	if err != nil {
		return nil, err
	}
	defer clear(cur[:])
	var cookie [cookieSize]byte
	defer clear(cookie[:])
	makeCookie(&cookie, &cur, src)

	reply := make([]byte, CookieReplySize)
	reply[0] = MsgCookieReply
	copy(reply[cookieReceiverOff:cookieNonceOff], msg[initSenderOff:initSenderOff+4])
	nonce := reply[cookieNonceOff:cookieSealedOff]
	if _, err := io.ReadFull(c.rand, nonce); err != nil {
		return nil, fmt.Errorf("%w: cookie nonce: %w", ErrRandom, err)
	}
	// The sealed cookie exactly fills the rest of reply, so Seal writes
	// in place.
	aead.Seal(reply[cookieSealedOff:cookieSealedOff], nonce, cookie[:], mac1)
	return reply, nil
}

// CookieJar is the initiator side of the cookie mechanism for one remote
// peer: it remembers the mac1 of the last handshake message sent to that
// peer, decrypts the cookie reply the peer answers it with, and adds mac2
// made with that cookie to the next handshake messages. Either end of a
// handshake can be the one under load, so a router keeps a CookieJar per
// peer and uses it for both initiations and responses it sends.
//
// Typical use when sending: build the message (mac1 in place), AddMAC2,
// Sent, transmit. When a cookie reply arrives: find the peer with
// CookieReplyReceiverIndex, ConsumeReply, and retry the handshake later
// (the reply does not say the peer would have accepted the message).
//
// A CookieJar is safe for concurrent use by multiple goroutines.
type CookieJar struct {
	key [blake2s.Size]byte // reply decryption key; read-only
	now func() time.Time   // read-only

	mu         sync.Mutex
	sentMAC1   [macSize]byte
	sentIndex  uint32
	haveSent   bool
	cookie     [cookieSize]byte
	cookieAt   time.Time
	haveCookie bool
}

// NewCookieJar returns a CookieJar for messages sent to the peer whose
// static public key is remote. now is the clock (nil means time.Now).
func NewCookieJar(remote PublicKey, now func() time.Time) *CookieJar {
	if now == nil {
		now = time.Now
	}
	return &CookieJar{key: cookieKey(remote), now: now}
}

// Sent records the mac1 and sender index of msg, a handshake message
// (initiation or response) just sent to the peer, so that a cookie reply
// to it can be decrypted. It replaces the previously recorded message;
// anything that is not an initiation or response is ignored. msg is only
// read.
func (j *CookieJar) Sent(msg []byte) {
	mac1, err := handshakeMAC1(msg)
	if err != nil {
		return
	}
	j.mu.Lock()
	copy(j.sentMAC1[:], mac1)
	j.sentIndex = binary.LittleEndian.Uint32(msg[initSenderOff:])
	j.haveSent = true
	j.mu.Unlock()
}

// ConsumeReply decrypts a cookie reply and stores the cookie, stamped with
// the current time, for AddMAC2. Checks, in order: size (ErrMessageSize),
// type (ErrMessageType), reserved bytes (ErrReserved), a message was Sent
// and not yet answered (ErrCookie), receiver index equal to the sender
// index of that message (ErrIndexMismatch), authentication with that
// message's mac1 as associated data (ErrCookie). Each Sent message can be
// answered once: replaying a consumed reply gives ErrCookie. A failed
// reply changes nothing. reply is only read.
func (j *CookieJar) ConsumeReply(reply []byte) error {
	if len(reply) != CookieReplySize {
		return ErrMessageSize
	}
	if err := checkHeader(reply, MsgCookieReply); err != nil {
		return err
	}
	aead, err := chacha20poly1305.NewX(j.key[:])
	if err != nil {
		return fmt.Errorf("%w: %v", ErrCookie, err)
	}
	now := j.now()
	// The lock is held across the decryption (well under a
	// microsecond) so that the reply is checked against, and
	// consumes, exactly the message recorded by the last Sent.
	j.mu.Lock()
	defer j.mu.Unlock()
	if !j.haveSent {
		return ErrCookie
	}
	if binary.LittleEndian.Uint32(reply[cookieReceiverOff:]) != j.sentIndex {
		return ErrIndexMismatch
	}
	var cookie [cookieSize]byte
	defer clear(cookie[:])
	pt, err := aead.Open(cookie[:0], reply[cookieNonceOff:cookieSealedOff], reply[cookieSealedOff:], j.sentMAC1[:])
	if err != nil || len(pt) != cookieSize {
		return ErrCookie
	}
	j.cookie = cookie
	j.cookieAt = now
	j.haveCookie = true
	j.haveSent = false
	return nil
}

// AddMAC2 writes mac2 into the last 16 bytes of msg, an initiation or a
// response to the peer whose mac1 is already in place: BLAKE2s-128 keyed
// by the cookie over every byte before mac2, if the jar holds a cookie
// received less than 115 s ago (120 s minus a safety margin). Otherwise
// it sets mac2 to zero. Anything that is not an initiation or response is
// left untouched.
func (j *CookieJar) AddMAC2(msg []byte) {
	if _, err := handshakeMAC1(msg); err != nil {
		return
	}
	now := j.now()
	j.mu.Lock()
	cookie := j.cookie
	age := now.Sub(j.cookieAt)
	valid := j.haveCookie && age >= 0 && age < cookieJarLifetime
	j.mu.Unlock()
	defer clear(cookie[:])

	mac2 := (*[macSize]byte)(msg[len(msg)-macSize:])
	if !valid {
		clear(mac2[:])
		return
	}
	mac128(mac2, cookie[:], msg[:len(msg)-macSize])
}

// CookieReplyReceiverIndex returns the receiver index of a cookie reply so
// the router can find the peer (and its CookieJar) the reply is for. It
// checks only size, type and reserved bytes; no cryptography.
func CookieReplyReceiverIndex(reply []byte) (uint32, bool) {
	if len(reply) != CookieReplySize || checkHeader(reply, MsgCookieReply) != nil {
		return 0, false
	}
	return binary.LittleEndian.Uint32(reply[cookieReceiverOff:]), true
}
