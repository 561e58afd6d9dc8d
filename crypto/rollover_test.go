package crypto

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
	"time"
)

// TestKeyRingAnswersBothKeys: during the overlap an initiation made to the
// new key and one made to the old key both complete, with no trial
// Diffie-Hellman (Select goes by mac1); after it the old key is refused
// with ErrKeyExpired before any Diffie-Hellman.
func TestKeyRingAnswersBothKeys(t *testing.T) {
	pro := Prologue("c")
	a := testIdentity(t, 1, AESGCM, pro)
	oldB := testIdentity(t, 2, AESGCM, pro)
	newB := testIdentity(t, 3, AESGCM, pro)
	until := testNow.Add(time.Hour)
	ring := NewKeyRing(oldB).Rotate(newB, until)
	if ring.Current != newB || ring.Previous != oldB {
		t.Fatal("Rotate did not keep the old identity as Previous")
	}
	tests := []struct {
		name     string
		to       PublicKey
		at       time.Time
		previous bool
		err      error
	}{
		{"new key", newB.Public, testNow, false, nil},
		{"old key in the overlap", oldB.Public, testNow, true, nil},
		{"new key after the overlap", newB.Public, until, false, nil},
		{"old key at the end of the overlap", oldB.Public, until, true, ErrKeyExpired},
		{"old key after the overlap", oldB.Public, until.Add(time.Second), true, ErrKeyExpired},
		{"unknown key", a.Public, testNow, false, ErrMAC1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			in, msg, err := a.CreateInitiation(tc.to, 7, testNow)
			if err != nil {
				t.Fatal(err)
			}
			ri, err := ring.ConsumeInitiation(msg, tc.at)
			if !errors.Is(err, tc.err) {
				t.Fatalf("ConsumeInitiation: %v, want %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if ri.Previous != tc.previous {
				t.Fatalf("Previous = %v, want %v", ri.Previous, tc.previous)
			}
			kb, resp, err := ring.Current.CreateResponse(ri, 9, testNow)
			if err != nil {
				t.Fatal(err)
			}
			ka, err := in.ConsumeResponse(resp, testNow)
			if err != nil {
				t.Fatalf("ConsumeResponse: %v", err)
			}
			exchange(t, ka, kb)
			exchange(t, kb, ka)
		})
	}
	if got := ring.Expire(until); got.Previous != nil || got.Current != newB {
		t.Fatal("Expire kept the previous identity after the overlap")
	}
	if got := ring.Expire(testNow); got != ring {
		t.Fatal("Expire dropped the previous identity inside the overlap")
	}
}

func psk(t *testing.T, seed byte) PresharedKey {
	t.Helper()
	k, err := GeneratePresharedKey(detRand(seed + 50))
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// TestPSKHandshake: the initiator tries its keys in order and completes
// with the one the responder mixed in, at the cost of no extra
// Diffie-Hellman; a pair whose keys differ fails with ErrPSK.
func TestPSKHandshake(t *testing.T) {
	pro := Prologue("c")
	k1, k2, k3 := psk(t, 1), psk(t, 2), psk(t, 3)
	tests := []struct {
		name      string
		initiator []PresharedKey
		responder PresharedKey
		used      int
		err       error
	}{
		{"one key", []PresharedKey{k1}, k1, 0, nil},
		{"rotation: responder has the first", []PresharedKey{k2, k1}, k2, 0, nil},
		{"rotation: responder has the second", []PresharedKey{k2, k1}, k1, 1, nil},
		{"mismatch", []PresharedKey{k1, k2}, k3, 0, ErrPSK},
	}
	for _, kind := range ciphers {
		for _, tc := range tests {
			t.Run(kind.String()+"/"+tc.name, func(t *testing.T) {
				a := testIdentity(t, 1, kind, pro)
				b := testIdentity(t, 2, kind, pro)
				in, msg, err := a.CreateInitiationPSK(b.Public, tc.initiator, 7, testNow)
				if err != nil {
					t.Fatal(err)
				}
				if msg[1] != FlagPSK {
					t.Fatalf("initiation byte 1 = %d, want FlagPSK", msg[1])
				}
				ri, err := b.ConsumeInitiation(msg)
				if err != nil {
					t.Fatal(err)
				}
				if !ri.PSK {
					t.Fatal("responder did not see the PSK flag")
				}
				if err := ri.SetPresharedKey(tc.responder); err != nil {
					t.Fatal(err)
				}
				kb, resp, err := b.CreateResponse(ri, 9, testNow)
				if err != nil {
					t.Fatal(err)
				}
				ops := in.dh.ops
				ka, err := in.ConsumeResponse(resp, testNow)
				if !errors.Is(err, tc.err) {
					t.Fatalf("ConsumeResponse: %v, want %v", err, tc.err)
				}
				// ee and se once, whatever the number of keys tried.
				if got := in.dh.ops - ops; got != 2 {
					t.Errorf("reading the response cost %d X25519, want 2", got)
				}
				if err != nil {
					if !errors.Is(err, ErrHandshake) {
						t.Errorf("%v does not wrap ErrHandshake", err)
					}
					return
				}
				if in.PSKUsed() != tc.used {
					t.Errorf("PSKUsed = %d, want %d", in.PSKUsed(), tc.used)
				}
				exchange(t, ka, kb)
				exchange(t, kb, ka)
			})
		}
	}
}

// TestPSKModeMismatch: a responder without the key cannot answer an IKpsk2
// initiation, and one that sets a key on a plain initiation is refused;
// a plain IK initiation is unchanged on the wire (byte 1 zero), so it
// still completes with a responder that predates preshared keys.
func TestPSKModeMismatch(t *testing.T) {
	pro := Prologue("c")
	a := testIdentity(t, 1, AESGCM, pro)
	b := testIdentity(t, 2, AESGCM, pro)
	_, msg, err := a.CreateInitiationPSK(b.Public, []PresharedKey{psk(t, 1)}, 7, testNow)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.CreateResponse(ri, 9, testNow); !errors.Is(err, ErrPSK) {
		t.Fatalf("response without a key: %v, want ErrPSK", err)
	}
	_, plain, err := a.CreateInitiation(b.Public, 7, testNow)
	if err != nil {
		t.Fatal(err)
	}
	if plain[1] != 0 {
		t.Fatalf("plain initiation byte 1 = %d", plain[1])
	}
	ri, err = b.ConsumeInitiation(plain)
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.SetPresharedKey(psk(t, 1)); !errors.Is(err, ErrPSK) {
		t.Fatalf("key on a plain initiation: %v, want ErrPSK", err)
	}
	// Any other flag bit is reserved.
	plain[1] = 2
	if _, err := b.ConsumeInitiation(plain); !errors.Is(err, ErrReserved) {
		t.Fatalf("byte 1 = 2: %v, want ErrReserved", err)
	}
}

func TestParsePresharedKeys(t *testing.T) {
	k1, k2, k3 := psk(t, 1), psk(t, 2), psk(t, 3)
	tests := []struct {
		name, in string
		want     int
		err      string
	}{
		{"one", k1.String() + "\n", 1, ""},
		{"two with comments", "# rotation\n" + k1.String() + "\n\n  " + k2.String() + "  \n", 2, ""},
		{"empty", "# nothing\n", 0, "no preshared key"},
		{"three", k1.String() + "\n" + k2.String() + "\n" + k3.String(), 0, "line 3: more than 2"},
		{"twice", k1.String() + "\n" + k1.String(), 0, "line 2: the same key twice"},
		{"bad base64", "not-a-key", 0, "line 1: preshared key is not valid"},
		{"zero", PresharedKey{}.String(), 0, "all zero"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			keys, err := ParsePresharedKeys([]byte(tc.in))
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err = %v, want %q", err, tc.err)
				}
				return
			}
			if err != nil || len(keys) != tc.want {
				t.Fatalf("got %d keys, %v; want %d", len(keys), err, tc.want)
			}
		})
	}
}

func FuzzParsePresharedKeys(f *testing.F) {
	f.Add([]byte("# c\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAE=\n"))
	f.Add([]byte("\n\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		keys, err := ParsePresharedKeys(data)
		if err != nil {
			return
		}
		if len(keys) == 0 || len(keys) > MaxPresharedKeys {
			t.Fatalf("%d keys accepted", len(keys))
		}
		for _, k := range keys {
			if k == (PresharedKey{}) {
				t.Fatal("zero key accepted")
			}
		}
	})
}

// TestMAC1CheckerRing: the outside loop's pre-filter passes messages for
// either key of the ring, follows a new ring, and allocates nothing
// while the ring stays the same.
func TestMAC1CheckerRing(t *testing.T) {
	pro := Prologue("c")
	a := testIdentity(t, 1, AESGCM, pro)
	oldB := testIdentity(t, 2, AESGCM, pro)
	newB := testIdentity(t, 3, AESGCM, pro)
	one := NewKeyRing(oldB)
	two := one.Rotate(newB, testNow.Add(time.Hour))
	msgFor := func(to PublicKey) []byte {
		_, m, err := a.CreateInitiation(to, 7, testNow)
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	toOld, toNew := msgFor(oldB.Public), msgFor(newB.Public)
	c := NewMAC1Checker(oldB.Public)
	if !c.CheckRing(one, toOld) || c.CheckRing(one, toNew) {
		t.Fatal("one-key ring: wrong verdicts")
	}
	if !c.CheckRing(two, toOld) || !c.CheckRing(two, toNew) {
		t.Fatal("rotated ring: both keys must pass")
	}
	if c.CheckRing(two.Expire(testNow.Add(time.Hour)), toOld) {
		t.Fatal("expired ring: the old key passed")
	}
	if n := testing.AllocsPerRun(100, func() { c.CheckRing(two, toNew) }); n > 0 {
		t.Fatalf("CheckRing allocates %v per call on a steady ring", n)
	}
}

// TestCookieReplyPSKAndPrevious: under load a PSK initiation gets a cookie
// reply too, and one made for the previous key gets a reply its sender
// can open (keyed by the key it addressed).
func TestCookieReplyPSKAndPrevious(t *testing.T) {
	pro := Prologue("c")
	a := testIdentity(t, 1, AESGCM, pro)
	oldB := testIdentity(t, 2, AESGCM, pro)
	newB := testIdentity(t, 3, AESGCM, pro)
	src := netip.MustParseAddrPort("192.0.2.1:51820")
	now := func() time.Time { return testNow }
	checker := NewCookieChecker(newB.Public, detRand(9), now)
	_, msg, err := a.CreateInitiationPSK(oldB.Public, []PresharedKey{psk(t, 1)}, 7, testNow)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := checker.CreateReplyAs(msg, src, oldB.Public)
	if err != nil {
		t.Fatalf("CreateReplyAs: %v", err)
	}
	jar := NewCookieJar(oldB.Public, now)
	jar.Sent(msg)
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("the sender cannot open the reply: %v", err)
	}
	jar.AddMAC2(msg)
	if !checker.CheckMAC2(msg, src) {
		t.Fatal("mac2 of a PSK initiation not accepted")
	}
}

// BenchmarkConsumeResponsePSK: what an initiator pays to read a response
// with no preshared key, with its first key, and with its second (the
// rotation's worst case: the first try's two X25519 are kept, so the
// second costs hashes and one AEAD open).
func BenchmarkConsumeResponsePSK(b *testing.B) {
	pro := Prologue("c")
	k1, k2 := PresharedKey{1}, PresharedKey{2}
	for _, bc := range []struct {
		name      string
		initiator []PresharedKey
		responder *PresharedKey
	}{{"ik", nil, nil}, {"psk_first", []PresharedKey{k1, k2}, &k1}, {"psk_second", []PresharedKey{k2, k1}, &k1}} {
		b.Run(bc.name, func(b *testing.B) {
			a := testIdentity(b, 1, AESGCM, pro)
			r := testIdentity(b, 2, AESGCM, pro)
			for b.Loop() {
				b.StopTimer()
				in, msg, err := a.CreateInitiationPSK(r.Public, bc.initiator, 7, testNow)
				if err != nil {
					b.Fatal(err)
				}
				ri, err := r.ConsumeInitiation(msg)
				if err != nil {
					b.Fatal(err)
				}
				if bc.responder != nil {
					ri.SetPresharedKey(*bc.responder)
				}
				_, resp, err := r.CreateResponse(ri, 9, testNow)
				if err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				if _, err := in.ConsumeResponse(resp, testNow); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
