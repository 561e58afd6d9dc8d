package crypto

import (
	"crypto/subtle"
	"hash"

	"golang.org/x/crypto/blake2s"
)

// mac1Label prefixes the recipient's public key when deriving the mac1 key.
const mac1Label = "mac1----"

// mac1Key returns BLAKE2s-256("mac1----" || recipient).
func mac1Key(recipient PublicKey) [blake2s.Size]byte {
	var in [len(mac1Label) + KeySize]byte
	copy(in[:], mac1Label)
	copy(in[len(mac1Label):], recipient[:])
	return blake2s.Sum256(in[:])
}

// computeMAC1 writes keyed BLAKE2s-128 of msg[:len(msg)-32] into out. msg
// must be at least 32 bytes long.
func computeMAC1(out *[macSize]byte, msg []byte, recipient PublicKey) {
	key := mac1Key(recipient)
	h, err := blake2s.New128(key[:])
	if err != nil {
		// Only possible for a bad key length, which is fixed here.
		clear(out[:])
		return
	}
	h.Write(msg[:len(msg)-2*macSize])
	h.Sum(out[:0])
}

// CheckMAC1 reports whether the mac1 field of a handshake message (the 16
// bytes before the final 16-byte mac2) is valid for recipient. It is cheap
// (one BLAKE2s pass, no Diffie-Hellman) and lets a node drop handshake
// messages not addressed to its public key before spending any DH work.
// mac1 is keyed only by a public key, so it is a filter, not
// authentication.
func CheckMAC1(msg []byte, recipient PublicKey) bool {
	if len(msg) < 2*macSize {
		return false
	}
	var want [macSize]byte
	computeMAC1(&want, msg, recipient)
	got := msg[len(msg)-2*macSize : len(msg)-macSize]
	return subtle.ConstantTimeCompare(want[:], got) == 1
}

// writeMAC1 fills in the mac1 field of msg and zeroes mac2.
func writeMAC1(msg []byte, recipient PublicKey) {
	var m [macSize]byte
	computeMAC1(&m, msg, recipient)
	copy(msg[len(msg)-2*macSize:], m[:])
	clear(msg[len(msg)-macSize:])
}

// MAC1Checker checks mac1 for one recipient key with no allocation: the
// key is derived once and the keyed hasher is reset, not rebuilt, per
// message. It is what a receive loop uses under a flood of handshake
// messages. Not safe for concurrent use; give each loop its own.
type MAC1Checker struct {
	h   hash.Hash
	sum [blake2s.Size]byte
	// ring is the KeyRing h and prev are keyed for (CheckRing): nil
	// for a checker of one key.
	ring *KeyRing
	prev hash.Hash
}

// NewMAC1Checker returns a checker for messages addressed to recipient.
func NewMAC1Checker(recipient PublicKey) *MAC1Checker {
	key := mac1Key(recipient)
	h, err := blake2s.New128(key[:])
	if err != nil {
		panic("crypto: BLAKE2s rejected a 32-byte key") // fixed key length: unreachable
	}
	return &MAC1Checker{h: h}
}

// Check reports what CheckMAC1 reports, without allocating.
func (c *MAC1Checker) Check(msg []byte) bool { return c.check(c.h, msg) }

func (c *MAC1Checker) check(h hash.Hash, msg []byte) bool {
	if len(msg) < 2*macSize {
		return false
	}
	h.Reset()
	h.Write(msg[:len(msg)-2*macSize])
	want := h.Sum(c.sum[:0])
	got := msg[len(msg)-2*macSize : len(msg)-macSize]
	return subtle.ConstantTimeCompare(want[:macSize], got) == 1
}

// CheckRing reports whether msg's mac1 is valid for ring's Current or
// Previous key, whatever the overlap (KeyRing.Select decides that). It
// rekeys the checker when ring is not the ring of the last call, which
// allocates; calls with the same ring do not.
func (c *MAC1Checker) CheckRing(ring *KeyRing, msg []byte) bool {
	if ring != c.ring {
		c.h = NewMAC1Checker(ring.Current.Public).h
		c.prev = nil
		if ring.Previous != nil {
			c.prev = NewMAC1Checker(ring.Previous.Public).h
		}
		c.ring = ring
	}
	return c.check(c.h, msg) || (c.prev != nil && c.check(c.prev, msg))
}
