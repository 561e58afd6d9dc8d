package crypto

import (
	cryptorand "crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"strings"

	"golang.org/x/crypto/curve25519"
)

// KeySize is the length in bytes of a curve25519 private or public key.
const KeySize = 32

// PrivateKey is a curve25519 private key. It is a plain value: copies are
// independent and it is safe to read from many goroutines.
type PrivateKey [KeySize]byte

// PublicKey is a curve25519 public key. It is a plain comparable value and
// may be used as a map key.
type PublicKey [KeySize]byte

// GeneratePrivateKey reads 32 bytes from rand (crypto/rand.Reader if nil)
// and clamps them into a curve25519 scalar.
func GeneratePrivateKey(rand io.Reader) (PrivateKey, error) {
	if rand == nil {
		rand = cryptorand.Reader
	}
	var k PrivateKey
	if _, err := io.ReadFull(rand, k[:]); err != nil {
		return PrivateKey{}, fmt.Errorf("generating private key: %w", err)
	}
	k.clamp()
	return k, nil
}

func (k *PrivateKey) clamp() {
	k[0] &= 248
	k[31] &= 127
	k[31] |= 64
}

// PublicKey derives the public key for k.
func (k PrivateKey) PublicKey() PublicKey {
	var p PublicKey
	// X25519 with the base point only fails for an all-zero result,
	// which cannot happen: clamping makes the scalar non-zero mod the
	// group order.
	out, err := curve25519.X25519(k[:], curve25519.Basepoint)
	if err == nil {
		copy(p[:], out)
	}
	return p
}

// String returns the key in standard base64. It reveals the secret; do not
// log it.
func (k PrivateKey) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// String returns the key in standard base64.
func (k PublicKey) String() string { return base64.StdEncoding.EncodeToString(k[:]) }

// IsZero reports whether the key is all zero (for example unset).
func (k PublicKey) IsZero() bool { return k == PublicKey{} }

// ParsePrivateKey parses a standard base64 private key, ignoring
// surrounding whitespace. It rejects an all-zero key.
func ParsePrivateKey(s string) (PrivateKey, error) {
	var k PrivateKey
	if err := decodeKey("private", s, k[:]); err != nil {
		return PrivateKey{}, err
	}
	if k == (PrivateKey{}) {
		return PrivateKey{}, errors.New("private key is all zero")
	}
	return k, nil
}

// ParsePublicKey parses a standard base64 public key, ignoring surrounding
// whitespace. It rejects all-zero and other low-order curve25519 points,
// which would make every Diffie-Hellman result with them predictable.
func ParsePublicKey(s string) (PublicKey, error) {
	var k PublicKey
	if err := decodeKey("public", s, k[:]); err != nil {
		return PublicKey{}, err
	}
	if k.IsZero() {
		return PublicKey{}, errors.New("public key is all zero")
	}
	if !k.validPoint() {
		return PublicKey{}, errors.New("public key is a low-order curve25519 point")
	}
	return k, nil
}

// validPoint reports whether k is not a low-order point. X25519 returns an
// error when the shared result is all zero, which for a clamped scalar (a
// multiple of the cofactor) happens exactly for low-order inputs.
func (k PublicKey) validPoint() bool {
	var scalar [KeySize]byte
	scalar[0] = 8
	_, err := curve25519.X25519(scalar[:], k[:])
	return err == nil
}

func decodeKey(what, s string, dst []byte) error {
	s = strings.TrimSpace(s)
	if s == "" {
		return fmt.Errorf("%s key is empty", what)
	}
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return fmt.Errorf("%s key is not valid standard base64: %w", what, err)
	}
	if len(raw) != len(dst) {
		return fmt.Errorf("%s key decodes to %d bytes, want %d", what, len(raw), len(dst))
	}
	copy(dst, raw)
	clear(raw)
	return nil
}

// CipherKind selects the AEAD used for the handshake and transport
// messages. The zero value is invalid.
type CipherKind uint8

// Supported ciphers.
const (
	// AESGCM is AES-256-GCM; fastest where the CPU has AES instructions.
	AESGCM CipherKind = iota + 1
	// ChaChaPoly is ChaCha20-Poly1305; fast in software everywhere.
	ChaChaPoly
)

// ParseCipher parses "aesgcm" or "chachapoly" (surrounding whitespace is
// ignored).
func ParseCipher(s string) (CipherKind, error) {
	switch strings.TrimSpace(s) {
	case "aesgcm":
		return AESGCM, nil
	case "chachapoly":
		return ChaChaPoly, nil
	}
	return 0, fmt.Errorf("%w %q (want \"aesgcm\" or \"chachapoly\")", ErrCipher, s)
}

// String returns the name ParseCipher accepts.
func (c CipherKind) String() string {
	switch c {
	case AESGCM:
		return "aesgcm"
	case ChaChaPoly:
		return "chachapoly"
	}
	return fmt.Sprintf("CipherKind(%d)", uint8(c))
}

// valid reports whether c is a known cipher.
func (c CipherKind) valid() bool { return c == AESGCM || c == ChaChaPoly }
