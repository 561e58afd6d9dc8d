package config

import (
	"bytes"
	"crypto/ecdh"
	"encoding/base64"
	"errors"
	"fmt"
	"strings"
	"sync"
)

// keyLen is the length of an X25519 key.
const keyLen = 32

// The key checks live here rather than in package crypto so that config
// builds and tests on its own. They use the standard library's X25519.

// decodeKey decodes a standard base64 X25519 key (44 characters).
func decodeKey(s string) ([]byte, error) {
	if s == "" {
		return nil, errors.New("is empty")
	}
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, errors.New("is not valid base64")
	}
	if len(b) != keyLen {
		return nil, fmt.Errorf("decodes to %d bytes, want %d", len(b), keyLen)
	}
	return b, nil
}

// parsePublicKey decodes a peer's public key and rejects the zero key and
// low-order points: a handshake with those gives an all-zero shared
// secret that any attacker can compute.
func parsePublicKey(s string) ([]byte, error) {
	b, err := decodeKey(s)
	if err != nil {
		return nil, err
	}
	if isZero(b) {
		return nil, errors.New("is the all-zero key")
	}
	pub, err := ecdh.X25519().NewPublicKey(b)
	if err != nil {
		return nil, errors.New("is not an X25519 public key")
	}
	priv, err := lowOrderProbe()
	if err != nil {
		return nil, fmt.Errorf("cannot check key: %v", err)
	}
	if _, err := priv.ECDH(pub); err != nil {
		return nil, errors.New("is a low-order point")
	}
	return b, nil
}

// lowOrderProbe is the private key parsePublicKey multiplies peers' keys
// by. Any scalar works: X25519 clamps it to a multiple of the cofactor, so
// a low-order point always yields zero, which ECDH reports as an error.
// Made once (it costs a scalar multiplication, as much as the check
// itself, and catalogs list hundreds of keys); immutable afterwards.
var lowOrderProbe = sync.OnceValues(func() (*ecdh.PrivateKey, error) {
	scalar := make([]byte, keyLen)
	scalar[0] = 1
	return ecdh.X25519().NewPrivateKey(scalar)
})

// parsePrivateKey decodes the contents of a private key file: one base64
// key, surrounding whitespace ignored. It returns the matching public key.
func parsePrivateKey(data []byte) (pub []byte, err error) {
	b, err := decodeKey(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, err
	}
	if isZero(b) {
		return nil, errors.New("is the all-zero key")
	}
	priv, err := ecdh.X25519().NewPrivateKey(b)
	if err != nil {
		return nil, errors.New("is not an X25519 private key")
	}
	return priv.PublicKey().Bytes(), nil
}

func isZero(b []byte) bool {
	return bytes.Equal(b, make([]byte, len(b)))
}
