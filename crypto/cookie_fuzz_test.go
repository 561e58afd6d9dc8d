package crypto

import (
	"bytes"
	"errors"
	"net/netip"
	"os"
	"testing"
	"time"
)

// Cookie fuzz seeds live under testdata/fuzz next to the handshake ones.
// TestFuzzSeedsValidCookie keeps them honest; the command that rewrites
// the handshake seeds (BRIDGEHEAD_WRITE_FUZZ_SEEDS=1 go test -run
// TestWriteFuzzSeeds) rewrites these too.

var (
	fuzzCookieSrc   = netip.MustParseAddrPort("203.0.113.5:51820")
	fuzzCookieOther = netip.MustParseAddrPort("203.0.113.5:51821")
)

func fuzzClock() time.Time { return testNow }

// fuzzCookieChecker is the responder's deterministic checker: its secret
// is the first 32 bytes of detRand(70).
func fuzzCookieChecker(t testing.TB) *CookieChecker {
	return NewCookieChecker(fuzzResponder(t).Public, detRand(70), fuzzClock)
}

// fuzzCookieMessages returns the deterministic initiation, the cookie
// reply the fuzz checker sends to it from fuzzCookieSrc, and the
// initiation with the resulting mac2.
func fuzzCookieMessages(t testing.TB) (init, reply, withMAC2 []byte) {
	_, init = fuzzInitiation(t)
	checker := fuzzCookieChecker(t)
	jar := NewCookieJar(fuzzResponder(t).Public, fuzzClock)
	jar.Sent(init)
	reply, err := checker.CreateReply(init, fuzzCookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatal(err)
	}
	withMAC2 = bytes.Clone(init)
	jar.AddMAC2(withMAC2)
	return init, reply, withMAC2
}

func FuzzConsumeReply(f *testing.F) {
	f.Add([]byte{MsgCookieReply})
	f.Add(make([]byte, CookieReplySize))
	init, _, _ := fuzzCookieMessages(f)
	resp := fuzzResponder(f).Public
	f.Fuzz(func(t *testing.T, data []byte) {
		jar := NewCookieJar(resp, fuzzClock)
		jar.Sent(init)
		orig := bytes.Clone(data)
		err := jar.ConsumeReply(data)
		if !bytes.Equal(orig, data) {
			t.Fatal("ConsumeReply modified its input")
		}
		idx, ok := CookieReplyReceiverIndex(data)
		if err != nil {
			m := bytes.Clone(init)
			jar.AddMAC2(m)
			if !zeroMAC2(m) {
				t.Fatalf("failed reply (%v) left a cookie", err)
			}
			return
		}
		if len(data) != CookieReplySize || !ok || idx != fuzzInitIndex {
			t.Fatalf("accepted bad reply % x", data)
		}
		m := bytes.Clone(init)
		jar.AddMAC2(m)
		if zeroMAC2(m) {
			t.Fatal("accepted reply gave no cookie")
		}
		if err := jar.ConsumeReply(data); !errors.Is(err, ErrCookie) {
			t.Fatalf("reply consumed twice: %v", err)
		}
	})
}

func FuzzCheckMAC2(f *testing.F) {
	f.Add([]byte{MsgInitiation})
	checker := fuzzCookieChecker(f)
	f.Fuzz(func(t *testing.T, data []byte) {
		orig := bytes.Clone(data)
		ok := checker.CheckMAC2(data, fuzzCookieSrc)
		if !bytes.Equal(orig, data) {
			t.Fatal("CheckMAC2 modified its input")
		}
		if !ok {
			return
		}
		if _, err := handshakeMAC1(data); err != nil {
			t.Fatalf("accepted %d-byte message of type %d", len(data), data[0])
		}
		if checker.CheckMAC2(data, fuzzCookieOther) {
			t.Fatal("mac2 accepted from another source")
		}
		m := bytes.Clone(data)
		m[len(m)-1] ^= 1
		if checker.CheckMAC2(m, fuzzCookieSrc) {
			t.Fatal("mac2 accepted after changing it")
		}
	})
}

// cookieFuzzSeedFiles lists the checked-in cookie seeds.
func cookieFuzzSeedFiles(t testing.TB) map[string][]byte {
	init, reply, withMAC2 := fuzzCookieMessages(t)
	return map[string][]byte{
		"FuzzConsumeReply/real-reply":        reply,
		"FuzzConsumeReply/truncated":         reply[:len(reply)-1],
		"FuzzCheckMAC2/real-initiation-mac2": withMAC2,
		"FuzzCheckMAC2/zero-mac2":            init,
	}
}

func TestWriteFuzzSeedsCookie(t *testing.T) {
	if os.Getenv("BRIDGEHEAD_WRITE_FUZZ_SEEDS") != "1" {
		t.Skip("set BRIDGEHEAD_WRITE_FUZZ_SEEDS=1 to rewrite testdata/fuzz seeds")
	}
	writeSeeds(t, cookieFuzzSeedFiles(t))
}

func TestFuzzSeedsValidCookie(t *testing.T) {
	checkSeeds(t, cookieFuzzSeedFiles(t))
	// The real seeds pass the cryptographic checks, so the fuzz targets
	// start from their deep paths.
	init, reply, withMAC2 := fuzzCookieMessages(t)
	jar := NewCookieJar(fuzzResponder(t).Public, fuzzClock)
	jar.Sent(init)
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("real reply seed rejected: %v", err)
	}
	if !fuzzCookieChecker(t).CheckMAC2(withMAC2, fuzzCookieSrc) {
		t.Fatal("real mac2 seed rejected")
	}
	if fuzzCookieChecker(t).CheckMAC2(init, fuzzCookieSrc) {
		t.Fatal("zero mac2 seed accepted")
	}
}
