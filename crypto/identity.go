package crypto

import (
	cryptorand "crypto/rand"
	"io"

	"github.com/flynn/noise"
)

// prologueVersion names the wire protocol version in the prologue.
const prologueVersion = "bridgehead/1"

// Prologue returns "bridgehead/1" || 0x00 || clusterName. Both sides mix it
// into the Noise handshake hash, so nodes of different protocol versions or
// different clusters cannot complete a handshake with each other.
func Prologue(clusterName string) []byte {
	p := make([]byte, 0, len(prologueVersion)+1+len(clusterName))
	p = append(p, prologueVersion...)
	p = append(p, 0)
	return append(p, clusterName...)
}

// Identity is this node's long-term handshake configuration.
//
// The handshake methods only read the Identity, so one Identity may be
// shared by any number of goroutines as long as nobody modifies its fields
// (or the Prologue bytes, or concurrently uses Rand unsafely) while it is in
// use. To change keys, build a new Identity.
type Identity struct {
	Private  PrivateKey
	Public   PublicKey // must equal Private.PublicKey(); see Validate
	Cipher   CipherKind
	Prologue []byte
	Rand     io.Reader // nil means crypto/rand.Reader; must be safe for concurrent use if the Identity is shared

	// derivedPriv and derivedPub are the key pair NewIdentity derived:
	// while Private and Public still hold them, Validate skips the
	// X25519 that would check them again. Zero in an Identity built as
	// a literal, which Validate then checks in full every time.
	derivedPriv PrivateKey
	derivedPub  PublicKey
}

// NewIdentity returns the Identity of priv, computing its public key once:
// the handshake methods then validate it without an X25519 per message.
func NewIdentity(priv PrivateKey, cipher CipherKind, prologue []byte) *Identity {
	pub := priv.PublicKey()
	return &Identity{Private: priv, Public: pub, Cipher: cipher, Prologue: prologue, derivedPriv: priv, derivedPub: pub}
}

// Validate checks that Public matches Private and Cipher is known. The
// handshake methods call it too (after the cheap checks), so a
// misconfigured Identity fails with ErrIdentity rather than producing
// handshakes no peer can complete. For an Identity from NewIdentity whose
// keys were not changed since, it costs two comparisons.
func (id *Identity) Validate() error {
	if !id.Cipher.valid() || id.Public.IsZero() {
		return ErrIdentity
	}
	if id.Private == id.derivedPriv && id.Public == id.derivedPub {
		return nil
	}
	if id.Private.PublicKey() != id.Public {
		return ErrIdentity
	}
	return nil
}

func (id *Identity) rand() io.Reader {
	if id.Rand != nil {
		return id.Rand
	}
	return cryptorand.Reader
}

// noiseConfig returns the Noise IK configuration for this identity. peer is
// the responder's static key when initiating, nil when responding.
func (id *Identity) noiseConfig(initiator bool, peer []byte, rnd io.Reader) noise.Config {
	return id.noiseConfigDH(initiator, peer, rnd, noise.DH25519)
}

// noiseConfigDH is noiseConfig with X25519 done by dh (firstMessageDH).
func (id *Identity) noiseConfigDH(initiator bool, peer []byte, rnd io.Reader, dh noise.DHFunc) noise.Config {
	cf := noise.CipherAESGCM
	if id.Cipher == ChaChaPoly {
		cf = noise.CipherChaChaPoly
	}
	priv, pub := id.Private, id.Public // copies: noise keeps the slices
	return noise.Config{
		CipherSuite:   noise.NewCipherSuite(dh, cf, noise.HashBLAKE2s),
		Random:        rnd,
		Pattern:       noise.HandshakeIK,
		Initiator:     initiator,
		Prologue:      append([]byte(nil), id.Prologue...),
		StaticKeypair: noise.DHKey{Private: priv[:], Public: pub[:]},
		PeerStatic:    peer,
	}
}
