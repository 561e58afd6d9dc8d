package crypto

import (
	"bytes"
	"errors"
	"testing"
)

// sealRelay copies inner into a fresh buffer and seals it as a relay
// message for peer.
func sealRelay(t testing.TB, kp *Keypair, inner []byte, peer KeyID) []byte {
	t.Helper()
	buf := make([]byte, RelayOverhead+len(inner))
	copy(buf[RelayHeaderSize:], inner)
	msg, err := kp.SealRelay(buf, len(inner), peer)
	if err != nil {
		t.Fatalf("SealRelay: %v", err)
	}
	return msg
}

var testPeer = KeyID{1, 2, 3, 4, 5, 6, 7, 8}

func TestRelayRoundTrip(t *testing.T) {
	for _, kind := range ciphers {
		for _, n := range []int{0, 1, 32, 1420} {
			a, b := testKeypairs(t, kind)
			inner := bytes.Repeat([]byte{0xa5}, n)
			msg := sealRelay(t, a, inner, testPeer)
			if len(msg) != RelayOverhead+n {
				t.Fatalf("%v/%d: len %d, want %d", kind, n, len(msg), RelayOverhead+n)
			}
			if !bytes.Equal(msg[RelayHeaderSize:RelayHeaderSize+n], inner) {
				t.Fatalf("%v/%d: the datagram changed while sealing", kind, n)
			}
			rcv, ctr, peer, ok := ParseRelayHeader(msg)
			if !ok || rcv != b.LocalIndex || ctr != 0 || peer != testPeer {
				t.Fatalf("%v/%d: ParseRelayHeader = %x %d %x %v", kind, n, rcv, ctr, peer, ok)
			}
			before := bytes.Clone(msg)
			got, peer, ctr, err := b.OpenRelay(msg)
			if err != nil {
				t.Fatalf("%v/%d: OpenRelay: %v", kind, n, err)
			}
			if !bytes.Equal(got, inner) || peer != testPeer || ctr != 0 {
				t.Fatalf("%v/%d: OpenRelay = %x %x %d", kind, n, got, peer, ctr)
			}
			if !bytes.Equal(msg, before) {
				t.Fatalf("%v/%d: OpenRelay modified the message", kind, n)
			}
			if !b.CheckReplay(ctr) || b.CheckReplay(ctr) {
				t.Fatalf("%v/%d: replay window", kind, n)
			}
		}
	}
}

// TestRelayTamper: every single-bit change anywhere is refused, and the
// message is left as it was.
func TestRelayTamper(t *testing.T) {
	for _, kind := range ciphers {
		a, b := testKeypairs(t, kind)
		msg := sealRelay(t, a, []byte("end-to-end sealed datagram......"), testPeer)
		for i := range msg {
			m := bytes.Clone(msg)
			m[i] ^= 0x01
			_, _, _, err := b.OpenRelay(m)
			var want error = ErrAuth
			switch {
			case i == 0:
				want = ErrMessageType
			case i < 4:
				want = ErrReserved
			case i < 8:
				want = ErrIndexMismatch
			}
			if !errors.Is(err, want) {
				t.Fatalf("%v: bit flipped in byte %d: err %v, want %v", kind, i, err, want)
			}
		}
	}
}

// TestRelayNotTransport: a relay message cannot pass as a transport
// message or the other way round, although they share keys and counters.
func TestRelayNotTransport(t *testing.T) {
	for _, kind := range ciphers {
		a, b := testKeypairs(t, kind)
		relay := sealRelay(t, a, make([]byte, 32), testPeer)
		relay[0] = MsgTransport
		if _, _, err := b.Open(relay); !errors.Is(err, ErrAuth) {
			t.Fatalf("%v: relay message retyped as transport: %v", kind, err)
		}
		pkt := seal(t, a, make([]byte, 48))
		pkt[0] = MsgRelay
		if _, _, _, err := b.OpenRelay(pkt); !errors.Is(err, ErrAuth) {
			t.Fatalf("%v: transport message retyped as relay: %v", kind, err)
		}
	}
}

// TestRelaySharesCounter: relay and transport messages of one keypair
// draw from one counter, so one replay window covers both.
func TestRelaySharesCounter(t *testing.T) {
	a, b := testKeypairs(t, ChaChaPoly)
	p0 := seal(t, a, make([]byte, 16))
	r1 := sealRelay(t, a, make([]byte, 16), testPeer)
	p2 := seal(t, a, make([]byte, 16))
	if _, c, _ := b.Open(p0); c != 0 {
		t.Fatalf("transport counter %d, want 0", c)
	}
	_, _, c, err := b.OpenRelay(r1)
	if err != nil || c != 1 {
		t.Fatalf("relay counter %d (%v), want 1", c, err)
	}
	if _, c, _ := b.Open(p2); c != 2 {
		t.Fatalf("transport counter %d, want 2", c)
	}
	if a.SendCount() != 3 {
		t.Fatalf("SendCount %d, want 3", a.SendCount())
	}
}

func TestRelayErrors(t *testing.T) {
	a, b := testKeypairs(t, AESGCM)
	if _, err := a.SealRelay(make([]byte, RelayOverhead+9), 10, testPeer); !errors.Is(err, ErrBufferSize) {
		t.Fatalf("short buffer: %v", err)
	}
	if _, err := a.SealRelay(make([]byte, RelayOverhead), -1, testPeer); !errors.Is(err, ErrBufferSize) {
		t.Fatalf("negative length: %v", err)
	}
	msg := sealRelay(t, a, nil, testPeer)
	if _, _, _, err := b.OpenRelay(msg[:RelayOverhead-1]); !errors.Is(err, ErrMessageSize) {
		t.Fatalf("runt: %v", err)
	}
	if _, _, _, ok := ParseRelayHeader(msg[:RelayOverhead-1]); ok {
		t.Fatal("ParseRelayHeader accepted a runt")
	}
	a.sendCounter.Store(RejectAfterMessages)
	if _, err := a.SealRelay(make([]byte, RelayOverhead), 0, testPeer); !errors.Is(err, ErrCounterExhausted) {
		t.Fatalf("exhausted: %v", err)
	}
}

// TestRelayForwardInPlace is the hub's forward: open with the source's
// keypair, seal with the destination's, on one buffer, allocating
// nothing.
func TestRelayForwardInPlace(t *testing.T) {
	for _, kind := range ciphers {
		spokeA, hubA := testKeypairs(t, kind)
		hubB, spokeB := testKeypairs(t, kind)
		hubB.LocalIndex, hubB.RemoteIndex = 0x77, 0x88
		spokeB.LocalIndex, spokeB.RemoteIndex = 0x88, 0x77
		inner := bytes.Repeat([]byte{0x3c}, 1420)
		src, dst := KeyID{0xaa}, KeyID{0xbb}
		msg := sealRelay(t, spokeA, inner, dst)
		buf := make([]byte, len(msg))
		allocs := testing.AllocsPerRun(100, func() {
			copy(buf, msg)
			got, peer, ctr, err := hubA.OpenRelay(buf)
			if err != nil || peer != dst || ctr != 0 {
				panic("open")
			}
			if _, err := hubB.SealRelay(buf[:0:len(buf)], len(got), src); err != nil {
				panic(err)
			}
		})
		if allocs != 0 {
			t.Fatalf("%v: forward allocates %.1f times per datagram", kind, allocs)
		}
		got, peer, _, err := spokeB.OpenRelay(buf)
		if err != nil || peer != src || !bytes.Equal(got, inner) {
			t.Fatalf("%v: after forwarding: %v %x", kind, err, peer)
		}
	}
}

func FuzzOpenRelay(f *testing.F) {
	a, _ := testKeypairs(f, ChaChaPoly)
	f.Add(sealRelay(f, a, []byte("seed datagram"), testPeer))
	f.Add(sealRelay(f, a, nil, testPeer))
	f.Add([]byte{MsgRelay, 0, 0, 0})
	f.Fuzz(func(t *testing.T, msg []byte) {
		_, b := testKeypairs(t, ChaChaPoly)
		before := bytes.Clone(msg)
		rcv, ctr, peer, ok := ParseRelayHeader(msg)
		inner, p2, c2, err := b.OpenRelay(msg)
		if !bytes.Equal(msg, before) {
			t.Fatal("OpenRelay modified its input")
		}
		if err != nil {
			return
		}
		if !ok || rcv != b.LocalIndex || c2 != ctr || p2 != peer {
			t.Fatalf("OpenRelay accepted what ParseRelayHeader says: %x %d %x %v", rcv, ctr, peer, ok)
		}
		if len(inner) != len(msg)-RelayOverhead {
			t.Fatalf("inner length %d of a %d-byte message", len(inner), len(msg))
		}
	})
}
