package crypto

import (
	cryptorand "crypto/rand"
	"errors"
	"fmt"
	"io"
	"strings"
)

// PresharedKey is a symmetric key two sites share on top of their static
// keys: with one, handshakes run Noise IKpsk2 (as WireGuard's optional
// preshared key), so traffic recorded today stays secret even if
// curve25519 falls later. It is a plain value; String reveals it.
type PresharedKey [KeySize]byte

// MaxPresharedKeys is how many preshared keys one site pair may have at
// once: the one in use and, during a rotation, the other one. An
// initiator tries each on a response (see Initiation.ConsumeResponse), so
// this bounds that work.
const MaxPresharedKeys = 2

// FlagPSK in byte 1 of an initiation says the initiator runs IKpsk2. A
// responder needs it to read the initiation (the Noise protocol name and
// the ephemeral key's mixing differ) before it knows who sent it. It is
// never set without a preshared key, so a pair without one sends exactly
// the bytes of a release that predates preshared keys.
const FlagPSK byte = 1

// ErrPSK: the initiation's preshared-key mode does not match what the
// recipient has for that peer, or a response failed with every preshared
// key tried (the pair's keys differ, or the response was forged). Wrapped
// with ErrHandshake.
const ErrPSK Error = "crypto: preshared key mismatch"

// GeneratePresharedKey reads 32 random bytes from rand (crypto/rand if nil).
func GeneratePresharedKey(rand io.Reader) (PresharedKey, error) {
	if rand == nil {
		rand = cryptorand.Reader
	}
	var k PresharedKey
	if _, err := io.ReadFull(rand, k[:]); err != nil {
		return PresharedKey{}, fmt.Errorf("generating preshared key: %w", err)
	}
	return k, nil
}

// String returns the key in standard base64. It reveals the secret.
func (k PresharedKey) String() string { return PrivateKey(k).String() }

// ParsePresharedKey parses one standard base64 key (surrounding whitespace
// ignored) and rejects the all-zero key, which would add no secret.
func ParsePresharedKey(s string) (PresharedKey, error) {
	var k PresharedKey
	if err := decodeKey("preshared", s, k[:]); err != nil {
		return PresharedKey{}, err
	}
	if k == (PresharedKey{}) {
		return PresharedKey{}, errors.New("preshared key is all zero")
	}
	return k, nil
}

// ParsePresharedKeys parses a preshared-key file: one base64 key per line,
// blank lines and lines starting with '#' ignored, at least one and at
// most MaxPresharedKeys keys, no key twice. The first key is the one a
// gateway answers handshakes with; as initiator it tries each in order
// (see the package documentation, "Preshared keys"). Errors name the line.
func ParsePresharedKeys(data []byte) ([]PresharedKey, error) {
	var keys []PresharedKey
	for i, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, err := ParsePresharedKey(line)
		if err != nil {
			return nil, fmt.Errorf("line %d: %w", i+1, err)
		}
		for _, o := range keys {
			if o == k {
				return nil, fmt.Errorf("line %d: the same key twice", i+1)
			}
		}
		if len(keys) == MaxPresharedKeys {
			return nil, fmt.Errorf("line %d: more than %d keys", i+1, MaxPresharedKeys)
		}
		keys = append(keys, k)
	}
	if len(keys) == 0 {
		return nil, errors.New("no preshared key in it")
	}
	return keys, nil
}
