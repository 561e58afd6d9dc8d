package crypto

import (
	"testing"
	"time"

	"filippo.io/edwards25519"
)

// TestXEdDSAKeyConversion: the Edwards key the signer derives from its
// X25519 private key is the one the verifier derives from the X25519
// public key alone (convert_mont), for many keys: signatures made with one
// verify with the other.
func TestXEdDSAKeyConversion(t *testing.T) {
	for seed := range byte(64) {
		k, err := GeneratePrivateKey(detRand(seed))
		if err != nil {
			t.Fatal(err)
		}
		a, err := new(edwards25519.Scalar).SetBytesWithClamping(k[:])
		if err != nil {
			t.Fatal(err)
		}
		A := new(edwards25519.Point).ScalarBaseMult(a)
		if A.Bytes()[31]&0x80 != 0 {
			A.Negate(A)
		}
		got, err := montgomeryToEdwards(k.PublicKey())
		if err != nil {
			t.Fatal(err)
		}
		if got.Equal(A) != 1 {
			t.Fatalf("seed %d: convert_mont(kB) is not calculate_key_pair(k)", seed)
		}
		// The Edwards point's Montgomery form is the X25519 public key.
		if pub := k.PublicKey(); string(A.BytesMontgomery()) != string(pub[:]) {
			t.Fatalf("seed %d: Montgomery form differs from the X25519 public key", seed)
		}
	}
}

// TestRolloverSignature: the previous key's signature names the new key
// and the end of the overlap; any other key, end, signer or a changed
// byte fails.
func TestRolloverSignature(t *testing.T) {
	prev, err := GeneratePrivateKey(detRand(1))
	if err != nil {
		t.Fatal(err)
	}
	next, _ := GeneratePrivateKey(detRand(2))
	other, _ := GeneratePrivateKey(detRand(3))
	until := testNow.Add(24 * time.Hour)
	sig, err := SignRollover(prev, next.PublicKey(), until, detRand(4))
	if err != nil {
		t.Fatal(err)
	}
	if !VerifyRollover(prev.PublicKey(), next.PublicKey(), until, sig[:]) {
		t.Fatal("a genuine rollover signature does not verify")
	}
	tests := []struct {
		name             string
		signer, newKey   PublicKey
		until            time.Time
		mutate           func(s []byte)
		truncateOrExtend int
	}{
		{"another new key", prev.PublicKey(), other.PublicKey(), until, nil, 0},
		{"a longer overlap", prev.PublicKey(), next.PublicKey(), until.Add(time.Hour), nil, 0},
		{"another signer", other.PublicKey(), next.PublicKey(), until, nil, 0},
		{"R changed", prev.PublicKey(), next.PublicKey(), until, func(s []byte) { s[3] ^= 1 }, 0},
		{"s changed", prev.PublicKey(), next.PublicKey(), until, func(s []byte) { s[40] ^= 1 }, 0},
		{"s not canonical", prev.PublicKey(), next.PublicKey(), until, func(s []byte) { s[63] |= 0xf0 }, 0},
		{"short", prev.PublicKey(), next.PublicKey(), until, nil, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := append([]byte(nil), sig[:]...)
			if tc.mutate != nil {
				tc.mutate(s)
			}
			s = s[:len(s)+tc.truncateOrExtend]
			if VerifyRollover(tc.signer, tc.newKey, tc.until, s) {
				t.Fatal("verified")
			}
		})
	}
}

// TestRolloverSignatureManyKeys: signatures of many keys verify, whatever
// the signs of their Edwards points and of R (half of each are odd).
func TestRolloverSignatureManyKeys(t *testing.T) {
	for seed := range byte(200) {
		prev, _ := GeneratePrivateKey(detRand(seed))
		next, _ := GeneratePrivateKey(detRand(seed + 1))
		sig, err := SignRollover(prev, next.PublicKey(), testNow, detRand(seed+2))
		if err != nil {
			t.Fatal(err)
		}
		if !VerifyRollover(prev.PublicKey(), next.PublicKey(), testNow, sig[:]) {
			t.Fatalf("seed %d: a genuine signature does not verify (R sign bit %d)", seed, sig[31]>>7)
		}
	}
}

func FuzzVerifyRollover(f *testing.F) {
	prev, _ := GeneratePrivateKey(detRand(1))
	next, _ := GeneratePrivateKey(detRand(2))
	sig, _ := SignRollover(prev, next.PublicKey(), testNow, detRand(4))
	f.Add(sig[:], []byte(prev.PublicKey().String()))
	f.Fuzz(func(t *testing.T, sig, signer []byte) {
		var k PublicKey
		copy(k[:], signer)
		VerifyRollover(k, next.PublicKey(), testNow, sig) // must not panic
		if len(sig) == RolloverSignatureSize && k == prev.PublicKey() && VerifyRollover(k, next.PublicKey(), testNow.Add(time.Second), sig) {
			t.Fatal("a signature verified for another overlap end")
		}
	})
}
