package crypto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"
)

func TestHandshakeBothDirectionsBothCiphers(t *testing.T) {
	for _, kind := range ciphers {
		t.Run(kind.String(), func(t *testing.T) {
			a := testIdentity(t, 1, kind, Prologue("lab"))
			b := testIdentity(t, 2, kind, Prologue("lab"))
			for _, dir := range []struct {
				name string
				i, r *Identity
			}{{"a->b", a, b}, {"b->a", b, a}} {
				t.Run(dir.name, func(t *testing.T) {
					in, msg1, err := dir.i.CreateInitiation(dir.r.Public, 1111, testNow)
					if err != nil {
						t.Fatal(err)
					}
					if len(msg1) != InitiationSize || msg1[0] != MsgInitiation {
						t.Fatalf("initiation: len %d type %d", len(msg1), msg1[0])
					}
					if !bytes.Equal(msg1[initMAC2Off:], make([]byte, macSize)) {
						t.Fatal("mac2 not zero")
					}
					if !CheckMAC1(msg1, dir.r.Public) || CheckMAC1(msg1, dir.i.Public) {
						t.Fatal("initiation mac1 not keyed by the responder's key")
					}
					if in.SenderIndex() != 1111 || in.Peer() != dir.r.Public {
						t.Fatal("Initiation accessors wrong")
					}
					ri, err := dir.r.ConsumeInitiation(msg1)
					if err != nil {
						t.Fatal(err)
					}
					if ri.PeerStatic != dir.i.Public || ri.SenderIndex != 1111 || ri.Timestamp != NewTimestamp(testNow) {
						t.Fatalf("ReceivedInitiation fields wrong: %+v", ri)
					}
					kr, msg2, err := dir.r.CreateResponse(ri, 2222, testNow)
					if err != nil {
						t.Fatal(err)
					}
					if len(msg2) != ResponseSize || msg2[0] != MsgResponse || !CheckMAC1(msg2, dir.i.Public) {
						t.Fatal("bad response framing or mac1")
					}
					ki, err := in.ConsumeResponse(msg2, testNow)
					if err != nil {
						t.Fatal(err)
					}
					if !ki.Initiator || kr.Initiator {
						t.Fatal("Initiator flags wrong")
					}
					if ki.LocalIndex != 1111 || ki.RemoteIndex != 2222 || kr.LocalIndex != 2222 || kr.RemoteIndex != 1111 {
						t.Fatalf("indexes wrong: i %d/%d r %d/%d", ki.LocalIndex, ki.RemoteIndex, kr.LocalIndex, kr.RemoteIndex)
					}
					if !ki.Created.Equal(testNow) || !kr.Created.Equal(testNow) {
						t.Fatal("Created not set")
					}
					exchange(t, ki, kr)
					exchange(t, kr, ki)
				})
			}
		})
	}
}

// exchange sends a few messages from s to r and checks they arrive.
func exchange(t *testing.T, s, r *Keypair) {
	t.Helper()
	for i, payload := range [][]byte{nil, []byte("hello"), bytes.Repeat([]byte{0xab}, 1400)} {
		pkt := seal(t, s, payload)
		recv, ctr, ok := ParseTransportHeader(pkt)
		if !ok || recv != r.LocalIndex || ctr != uint64(i) {
			t.Fatalf("header: recv %d ctr %d ok %v", recv, ctr, ok)
		}
		pt, ctr, err := r.Open(pkt)
		if err != nil {
			t.Fatalf("Open: %v", err)
		}
		if ctr != uint64(i) || !bytes.Equal(pt, payload) || !r.CheckReplay(ctr) {
			t.Fatalf("message %d: got %q ctr %d", i, pt, ctr)
		}
	}
}

func TestHandshakeMismatch(t *testing.T) {
	tests := []struct {
		name string
		a, b *Identity
	}{
		{"prologue", testIdentity(t, 1, AESGCM, Prologue("one")), testIdentity(t, 2, AESGCM, Prologue("two"))},
		{"version", testIdentity(t, 1, AESGCM, []byte("bridgehead/0\x00x")), testIdentity(t, 2, AESGCM, Prologue("x"))},
		{"cipher", testIdentity(t, 1, AESGCM, Prologue("x")), testIdentity(t, 2, ChaChaPoly, Prologue("x"))},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, msg1, err := tc.a.CreateInitiation(tc.b.Public, 1, testNow)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tc.b.ConsumeInitiation(msg1); !errors.Is(err, ErrHandshake) {
				t.Fatalf("ConsumeInitiation: err %v, want ErrHandshake", err)
			}
		})
	}
}

// TestUnknownInitiator: the responder does not decide who is allowed; it
// reports the authenticated static key.
func TestUnknownInitiator(t *testing.T) {
	b := testIdentity(t, 2, ChaChaPoly, Prologue("x"))
	stranger := testIdentity(t, 99, ChaChaPoly, Prologue("x"))
	_, msg1, err := stranger.CreateInitiation(b.Public, 5, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg1)
	if err != nil {
		t.Fatal(err)
	}
	if ri.PeerStatic != stranger.Public {
		t.Fatal("PeerStatic is not the stranger's key")
	}
}

func TestConsumeInitiationRejects(t *testing.T) {
	a := testIdentity(t, 1, AESGCM, Prologue("x"))
	b := testIdentity(t, 2, AESGCM, Prologue("x"))
	c := testIdentity(t, 3, AESGCM, Prologue("x"))
	_, msg1, err := a.CreateInitiation(b.Public, 1, testNow)
	if err != nil {
		t.Fatal(err)
	}
	_, toC, err := a.CreateInitiation(c.Public, 1, testNow)
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func([]byte)) []byte {
		m := append([]byte(nil), msg1...)
		f(m)
		return m
	}
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMessageSize},
		{"short", msg1[:InitiationSize-1], ErrMessageSize},
		{"long", append(append([]byte(nil), msg1...), 0), ErrMessageSize},
		{"type", mod(func(m []byte) { m[0] = MsgResponse }), ErrMessageType},
		{"reserved", mod(func(m []byte) { m[2] = 1 }), ErrReserved},
		{"flipped body byte", mod(func(m []byte) { m[50] ^= 1 }), ErrMAC1},
		{"flipped sender index", mod(func(m []byte) { m[4] ^= 1 }), ErrMAC1},
		{"flipped mac1", mod(func(m []byte) { m[initMAC1Off] ^= 1 }), ErrMAC1},
		{"addressed to someone else", toC, ErrMAC1},
		{"forged with valid mac1", mod(func(m []byte) { m[50] ^= 1; writeMAC1(m, b.Public) }), ErrHandshake},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := b.ConsumeInitiation(tc.msg)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
			if tc.want != ErrHandshake && err != tc.want {
				t.Fatalf("cheap check returned a wrapped error %v", err)
			}
		})
	}
	// mac2 is not covered by mac1 and not checked yet.
	if _, err := b.ConsumeInitiation(mod(func(m []byte) { m[initMAC2Off] = 7 })); err != nil {
		t.Fatalf("non-zero mac2: %v", err)
	}
}

func TestConsumeResponseRejects(t *testing.T) {
	a := testIdentity(t, 1, ChaChaPoly, Prologue("x"))
	b := testIdentity(t, 2, ChaChaPoly, Prologue("x"))
	in, msg1, err := a.CreateInitiation(b.Public, 77, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg1)
	if err != nil {
		t.Fatal(err)
	}
	_, msg2, err := b.CreateResponse(ri, 88, testNow)
	if err != nil {
		t.Fatal(err)
	}
	mod := func(f func([]byte)) []byte {
		m := append([]byte(nil), msg2...)
		f(m)
		return m
	}
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"empty", nil, ErrMessageSize},
		{"short", msg2[:ResponseSize-1], ErrMessageSize},
		{"initiation", msg1, ErrMessageSize},
		{"type", mod(func(m []byte) { m[0] = MsgInitiation }), ErrMessageType},
		{"reserved", mod(func(m []byte) { m[3] = 1 }), ErrReserved},
		{"flipped body", mod(func(m []byte) { m[20] ^= 1 }), ErrMAC1},
		{"wrong receiver index", mod(func(m []byte) {
			binary.LittleEndian.PutUint32(m[respReceiverOff:], 78)
			writeMAC1(m, a.Public)
		}), ErrIndexMismatch},
		{"forged ephemeral", mod(func(m []byte) { m[respNoiseOff] ^= 1; writeMAC1(m, a.Public) }), ErrHandshake},
		{"low-order ephemeral", mod(func(m []byte) { clear(m[respNoiseOff : respNoiseOff+32]); writeMAC1(m, a.Public) }), ErrHandshake},
		{"forged tag", mod(func(m []byte) { m[respMAC1Off-1] ^= 1; writeMAC1(m, a.Public) }), ErrHandshake},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := in.ConsumeResponse(tc.msg, testNow)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	// None of the failures spent the initiation: the genuine response
	// still completes it, exactly once.
	kp, err := in.ConsumeResponse(msg2, testNow)
	if err != nil {
		t.Fatalf("genuine response after forgeries: %v", err)
	}
	if kp.RemoteIndex != 88 {
		t.Fatalf("RemoteIndex %d", kp.RemoteIndex)
	}
	if _, err := in.ConsumeResponse(msg2, testNow); err != ErrUsed {
		t.Fatalf("second ConsumeResponse: err %v, want ErrUsed", err)
	}
}

func TestCreateResponseSingleUse(t *testing.T) {
	a := testIdentity(t, 1, AESGCM, Prologue("x"))
	b := testIdentity(t, 2, AESGCM, Prologue("x"))
	_, msg1, err := a.CreateInitiation(b.Public, 1, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg1)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CreateResponse(ri, 2, testNow); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CreateResponse(ri, 2, testNow); err != ErrUsed {
		t.Fatalf("second CreateResponse: err %v, want ErrUsed", err)
	}
	if _, _, err := b.CreateResponse(&ReceivedInitiation{}, 2, testNow); !errors.Is(err, ErrHandshake) {
		t.Fatalf("zero ReceivedInitiation: err %v", err)
	}
}

func TestIdentityValidate(t *testing.T) {
	good := testIdentity(t, 1, AESGCM, Prologue("x"))
	peer := testIdentity(t, 2, AESGCM, Prologue("x"))
	badPub := *good
	badPub.Public = peer.Public
	badCipher := *good
	badCipher.Cipher = 0
	badPriv := *good // built by NewIdentity, then its private key changed
	badPriv.Private = peer.Private
	literal := &Identity{Private: good.Private, Public: peer.Public, Cipher: AESGCM}
	for name, id := range map[string]*Identity{"public mismatch": &badPub, "cipher": &badCipher, "private changed": &badPriv, "literal mismatch": literal} {
		if err := id.Validate(); err != ErrIdentity {
			t.Fatalf("%s: Validate = %v", name, err)
		}
		if _, _, err := id.CreateInitiation(peer.Public, 1, testNow); err != ErrIdentity {
			t.Fatalf("%s: CreateInitiation = %v", name, err)
		}
	}
	if err := good.Validate(); err != nil {
		t.Fatal(err)
	}
	// Initiating to a low-order key fails cleanly.
	if _, _, err := good.CreateInitiation(PublicKey{}, 1, testNow); !errors.Is(err, ErrHandshake) {
		t.Fatalf("initiation to zero key: %v", err)
	}
}

// TestValidateDerivesOnce: an Identity from NewIdentity is validated
// without recomputing its public key (an X25519, which allocates), as
// every handshake message that passes mac1 does; a literal Identity is
// still checked in full.
func TestValidateDerivesOnce(t *testing.T) {
	priv, err := GeneratePrivateKey(detRand(7))
	if err != nil {
		t.Fatal(err)
	}
	id := NewIdentity(priv, AESGCM, Prologue("x"))
	if n := testing.AllocsPerRun(100, func() {
		if id.Validate() != nil {
			t.Fatal("valid identity refused")
		}
	}); n != 0 {
		t.Fatalf("Validate of a built identity: %.0f allocations, want 0 (no X25519)", n)
	}
	if id.Public != priv.PublicKey() {
		t.Fatal("NewIdentity derived the wrong public key")
	}
	literal := &Identity{Private: priv, Public: priv.PublicKey(), Cipher: AESGCM}
	if err := literal.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestInitiationsAreFresh(t *testing.T) {
	a := testIdentity(t, 1, AESGCM, Prologue("x"))
	b := testIdentity(t, 2, AESGCM, Prologue("x"))
	_, m1, _ := a.CreateInitiation(b.Public, 1, testNow)
	_, m2, _ := a.CreateInitiation(b.Public, 1, testNow)
	if bytes.Equal(m1, m2) {
		t.Fatal("two initiations share an ephemeral key")
	}
}

// TestMAC1CheckedFirst shows mac1 is checked before any key work: an
// identity whose private key is unusable (so any DH or Validate would
// fail with ErrIdentity or ErrHandshake) still reports ErrMAC1 for a
// message with a bad mac1.
func TestMAC1CheckedFirst(t *testing.T) {
	a := testIdentity(t, 1, AESGCM, Prologue("x"))
	b := testIdentity(t, 2, AESGCM, Prologue("x"))
	_, msg1, err := a.CreateInitiation(b.Public, 1, testNow)
	if err != nil {
		t.Fatal(err)
	}
	broken := *b
	broken.Private = PrivateKey{}
	if _, err := broken.ConsumeInitiation(msg1); err != ErrIdentity {
		t.Fatalf("valid mac1, broken identity: %v, want ErrIdentity", err)
	}
	msg1[60] ^= 1
	if _, err := broken.ConsumeInitiation(msg1); err != ErrMAC1 {
		t.Fatalf("bad mac1, broken identity: %v, want ErrMAC1", err)
	}
}

// TestAbandon: an abandoned initiation has its ephemeral key zeroed and
// cannot complete, even with a valid response.
func TestAbandon(t *testing.T) {
	a := testIdentity(t, 1, AESGCM, Prologue("x"))
	b := testIdentity(t, 2, AESGCM, Prologue("x"))
	in, msg, err := a.CreateInitiation(b.Public, 1, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := b.CreateResponse(ri, 2, testNow)
	if err != nil {
		t.Fatal(err)
	}
	in.Abandon()
	if in.ephemeral != [KeySize]byte{} || in.hs != nil {
		t.Fatal("ephemeral key or Noise state kept after Abandon")
	}
	if _, err := in.ConsumeResponse(resp, testNow); err != ErrUsed {
		t.Fatalf("ConsumeResponse after Abandon: %v, want ErrUsed", err)
	}
}
