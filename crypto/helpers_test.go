package crypto

import (
	"io"
	mrand "math/rand/v2"
	"testing"
	"time"
)

// testNow is a fixed handshake time for deterministic tests.
var testNow = time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)

var ciphers = []CipherKind{AESGCM, ChaChaPoly}

// detRand returns a deterministic byte stream for reproducible keys and
// messages (fuzz seeds depend on it).
func detRand(seed byte) io.Reader {
	var s [32]byte
	s[0] = seed
	return mrand.NewChaCha8(s)
}

// testIdentity returns a deterministic identity derived from seed.
func testIdentity(t testing.TB, seed byte, kind CipherKind, prologue []byte) *Identity {
	t.Helper()
	priv, err := GeneratePrivateKey(detRand(seed))
	if err != nil {
		t.Fatal(err)
	}
	id := NewIdentity(priv, kind, prologue)
	id.Rand = detRand(seed + 100)
	return id
}

// handshake runs a full handshake from a to b and returns (initiator's,
// responder's) keypairs.
func handshake(t testing.TB, a, b *Identity) (*Keypair, *Keypair) {
	t.Helper()
	in, msg1, err := a.CreateInitiation(b.Public, 11, testNow)
	if err != nil {
		t.Fatalf("CreateInitiation: %v", err)
	}
	ri, err := b.ConsumeInitiation(msg1)
	if err != nil {
		t.Fatalf("ConsumeInitiation: %v", err)
	}
	kb, msg2, err := b.CreateResponse(ri, 22, testNow)
	if err != nil {
		t.Fatalf("CreateResponse: %v", err)
	}
	ka, err := in.ConsumeResponse(msg2, testNow)
	if err != nil {
		t.Fatalf("ConsumeResponse: %v", err)
	}
	return ka, kb
}

// testKeypairs returns two keypairs wired to each other with fixed keys,
// without a handshake: a sends with key1, b receives with key1.
func testKeypairs(t testing.TB, kind CipherKind) (*Keypair, *Keypair) {
	t.Helper()
	var k1, k2 [KeySize]byte
	for i := range k1 {
		k1[i], k2[i] = byte(i), byte(200-i)
	}
	a, err := newKeypair(kind, k1, k2)
	if err != nil {
		t.Fatal(err)
	}
	b, err := newKeypair(kind, k2, k1)
	if err != nil {
		t.Fatal(err)
	}
	a.LocalIndex, a.RemoteIndex = 0x01020304, 0x0a0b0c0d
	b.LocalIndex, b.RemoteIndex = a.RemoteIndex, a.LocalIndex
	return a, b
}

// seal copies payload into a fresh buffer and seals it.
func seal(t testing.TB, kp *Keypair, payload []byte) []byte {
	t.Helper()
	buf := make([]byte, TransportOverhead+len(payload))
	copy(buf[TransportHeaderSize:], payload)
	pkt, err := kp.Seal(buf, len(payload))
	if err != nil {
		t.Fatalf("Seal: %v", err)
	}
	return pkt
}
