package crypto

import (
	cryptorand "crypto/rand"
	"crypto/sha512"
	"encoding/binary"
	"errors"
	"io"
	"time"

	"filippo.io/edwards25519"
	"filippo.io/edwards25519/field"
)

// Rollover signatures: a gateway's previous static key vouches for its
// new one, so a control plane that pins keys (Kubernetes mode) can accept
// the rotation without an operator: whoever holds the old private key may
// name its successor. The keys are X25519 keys, which cannot sign as
// they are; XEdDSA (Signal's specification, "The XEdDSA and VXEdDSA
// Signature Schemes", revision 1) signs with the same private key on the
// birationally equivalent Edwards curve, and anyone can verify with the
// X25519 public key alone.

// RolloverSignatureSize is the length of a rollover signature (R || s).
const RolloverSignatureSize = 64

// rolloverLabel starts the signed statement.
const rolloverLabel = "bridgehead/rollover/1\x00"

// rolloverStatement is what the previous key signs: the label, the new
// public key and the end of the overlap (Unix seconds, big endian), so a
// signature cannot be moved to another key or stretch the overlap.
func rolloverStatement(next PublicKey, expires time.Time) []byte {
	m := make([]byte, 0, len(rolloverLabel)+KeySize+8)
	m = append(m, rolloverLabel...)
	m = append(m, next[:]...)
	return binary.BigEndian.AppendUint64(m, uint64(expires.Unix()))
}

// SignRollover signs, with the previous private key prev, that next is
// its successor and that prev is retired at expires. rand supplies the
// 64 random bytes XEdDSA mixes into its nonce (crypto/rand if nil).
func SignRollover(prev PrivateKey, next PublicKey, expires time.Time, rand io.Reader) ([RolloverSignatureSize]byte, error) {
	if rand == nil {
		rand = cryptorand.Reader
	}
	var z [64]byte
	if _, err := io.ReadFull(rand, z[:]); err != nil {
		return [RolloverSignatureSize]byte{}, err
	}
	return xeddsaSign(prev, rolloverStatement(next, expires), &z)
}

// VerifyRollover reports whether sig is prev's signature naming next its
// successor until expires.
func VerifyRollover(prev, next PublicKey, expires time.Time, sig []byte) bool {
	return xeddsaVerify(prev, rolloverStatement(next, expires), sig)
}

// xeddsaSign is xeddsa_sign(k, M, Z).
func xeddsaSign(k PrivateKey, msg []byte, z *[64]byte) ([RolloverSignatureSize]byte, error) {
	var sig [RolloverSignatureSize]byte
	// calculate_key_pair: E = kB; a = k or -k so that A = aB has sign 0.
	a, err := new(edwards25519.Scalar).SetBytesWithClamping(k[:])
	if err != nil {
		return sig, err
	}
	A := new(edwards25519.Point).ScalarBaseMult(a)
	aBytes := A.Bytes()
	if aBytes[31]&0x80 != 0 {
		a.Negate(a)
		A.Negate(A)
		aBytes = A.Bytes()
	}
	// r = hash1(a || M || Z) mod q, hash1(X) = SHA-512(0xFE || 0xFF*31 || X).
	h := sha512.New()
	var prefix [32]byte
	for i := range prefix {
		prefix[i] = 0xff
	}
	prefix[0] = 0xfe
	h.Write(prefix[:])
	h.Write(a.Bytes())
	h.Write(msg)
	h.Write(z[:])
	r, err := new(edwards25519.Scalar).SetUniformBytes(h.Sum(nil))
	if err != nil {
		return sig, err
	}
	R := new(edwards25519.Point).ScalarBaseMult(r)
	// h = SHA-512(R || A || M) mod q; s = r + h·a mod q.
	hs := challenge(R.Bytes(), aBytes, msg)
	s := new(edwards25519.Scalar).MultiplyAdd(hs, a, r)
	copy(sig[:32], R.Bytes())
	copy(sig[32:], s.Bytes())
	return sig, nil
}

func challenge(R, A, msg []byte) *edwards25519.Scalar {
	h := sha512.New()
	h.Write(R)
	h.Write(A)
	h.Write(msg)
	s, _ := new(edwards25519.Scalar).SetUniformBytes(h.Sum(nil)) // 64 bytes: cannot fail
	return s
}

// xeddsaVerify is xeddsa_verify(u, M, R || s).
func xeddsaVerify(u PublicKey, msg, sig []byte) bool {
	// R is compared by its encoding with R' below, which is canonical: a
	// non-canonical R never matches. Its top bit is x's sign, either way.
	if len(sig) != RolloverSignatureSize {
		return false
	}
	A, err := montgomeryToEdwards(u)
	if err != nil {
		return false
	}
	s, err := new(edwards25519.Scalar).SetCanonicalBytes(sig[32:])
	if err != nil {
		return false
	}
	hs := challenge(sig[:32], A.Bytes(), msg)
	// R' = sB - hA
	R := new(edwards25519.Point).VarTimeDoubleScalarBaseMult(new(edwards25519.Scalar).Negate(hs), A, s)
	return string(R.Bytes()) == string(sig[:32])
}

// montgomeryToEdwards is convert_mont(u): the Edwards point with
// y = (u - 1) / (u + 1) and sign bit 0. It refuses a non-canonical u and
// the points of small order, which no honest key is.
func montgomeryToEdwards(u PublicKey) (*edwards25519.Point, error) {
	masked := u
	masked[31] &= 0x7f
	fu, err := new(field.Element).SetBytes(masked[:])
	if err != nil || string(fu.Bytes()) != string(masked[:]) {
		return nil, errors.New("crypto: public key is not a canonical field element")
	}
	one := new(field.Element).One()
	num := new(field.Element).Subtract(fu, one)
	den := new(field.Element).Add(fu, one)
	y := new(field.Element).Multiply(num, new(field.Element).Invert(den))
	A, err := new(edwards25519.Point).SetBytes(y.Bytes())
	if err != nil {
		return nil, err
	}
	if new(edwards25519.Point).MultByCofactor(A).Equal(edwards25519.NewIdentityPoint()) == 1 {
		return nil, errors.New("crypto: public key of small order")
	}
	return A, nil
}
