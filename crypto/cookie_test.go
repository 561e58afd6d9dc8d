package crypto

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net/netip"
	"sync"
	"testing"
	"time"

	"golang.org/x/crypto/blake2s"
	"golang.org/x/crypto/chacha20poly1305"
)

// testClock is a hand-moved clock, safe for concurrent use.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func newTestClock() *testClock { return &testClock{t: testNow} }

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	cookieSrc      = netip.MustParseAddrPort("192.0.2.10:51820")
	cookieOtherIP  = netip.MustParseAddrPort("192.0.2.11:51820")
	cookieOtherPrt = netip.MustParseAddrPort("192.0.2.10:51821")
)

// cookieSetup returns an initiator a, a responder b, the responder's
// checker, the initiator's jar for b and their shared clock.
func cookieSetup(t testing.TB) (a, b *Identity, checker *CookieChecker, jar *CookieJar, clk *testClock) {
	t.Helper()
	a = testIdentity(t, 1, ChaChaPoly, Prologue("cookie"))
	b = testIdentity(t, 2, ChaChaPoly, Prologue("cookie"))
	clk = newTestClock()
	checker = NewCookieChecker(b.Public, detRand(50), clk.Now)
	jar = NewCookieJar(b.Public, clk.Now)
	return
}

func initiation(t testing.TB, from, to *Identity, index uint32) []byte {
	t.Helper()
	_, msg, err := from.CreateInitiation(to.Public, index, testNow)
	if err != nil {
		t.Fatal(err)
	}
	return msg
}

// obtainCookie sends msg through the jar, has the checker answer it from
// src and feeds the reply back.
func obtainCookie(t testing.TB, checker *CookieChecker, jar *CookieJar, msg []byte, src netip.AddrPort) []byte {
	t.Helper()
	jar.Sent(msg)
	reply, err := checker.CreateReply(msg, src)
	if err != nil {
		t.Fatalf("CreateReply: %v", err)
	}
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("ConsumeReply: %v", err)
	}
	return reply
}

func zeroMAC2(msg []byte) bool { return bytes.Equal(msg[len(msg)-macSize:], make([]byte, macSize)) }

func TestCookieRoundTrip(t *testing.T) {
	a, b, checker, jar, clk := cookieSetup(t)
	msg := initiation(t, a, b, 0x01020304)
	if checker.CheckMAC2(msg, cookieSrc) {
		t.Fatal("zero mac2 accepted")
	}
	jar.AddMAC2(msg) // no cookie yet
	if !zeroMAC2(msg) {
		t.Fatal("AddMAC2 without a cookie wrote mac2")
	}

	jar.Sent(msg)
	reply, err := checker.CreateReply(msg, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	if len(reply) != CookieReplySize || reply[0] != MsgCookieReply || reply[1]|reply[2]|reply[3] != 0 {
		t.Fatalf("reply header % x, len %d", reply[:4], len(reply))
	}
	if idx, ok := CookieReplyReceiverIndex(reply); !ok || idx != 0x01020304 {
		t.Fatalf("receiver index %#x %v", idx, ok)
	}
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("ConsumeReply: %v", err)
	}

	// The retried handshake carries mac2 and still passes mac1.
	retry := initiation(t, a, b, 0x01020304)
	jar.AddMAC2(retry)
	if zeroMAC2(retry) {
		t.Fatal("AddMAC2 with a cookie left mac2 zero")
	}
	if !CheckMAC1(retry, b.Public) {
		t.Fatal("AddMAC2 broke mac1")
	}
	if _, err := b.ConsumeInitiation(retry); err != nil {
		t.Fatalf("initiation with mac2 rejected: %v", err)
	}
	if !checker.CheckMAC2(retry, cookieSrc) {
		t.Fatal("mac2 rejected for the source the cookie was issued to")
	}
	for _, src := range []netip.AddrPort{cookieOtherIP, cookieOtherPrt, netip.MustParseAddrPort("[2001:db8::10]:51820")} {
		if checker.CheckMAC2(retry, src) {
			t.Fatalf("mac2 accepted from %v", src)
		}
	}
	// mac2 covers the whole message before it.
	for _, i := range []int{0 + 4, initNoiseOff, initMAC1Off, initMAC2Off - 1, initMAC2Off, InitiationSize - 1} {
		m := bytes.Clone(retry)
		m[i] ^= 0x40
		if checker.CheckMAC2(m, cookieSrc) {
			t.Fatalf("mac2 accepted after flipping byte %d", i)
		}
	}
	// A checker with another secret does not know the cookie.
	other := NewCookieChecker(b.Public, detRand(51), clk.Now)
	if other.CheckMAC2(retry, cookieSrc) {
		t.Fatal("mac2 accepted by a checker with another secret")
	}
}

// TestCookieWireLayout checks the reply and mac2 against the documented
// construction, independently of the package's helpers.
func TestCookieWireLayout(t *testing.T) {
	a, b, checker, jar, _ := cookieSetup(t)
	msg := initiation(t, a, b, 77)
	reply := obtainCookie(t, checker, jar, msg, cookieSrc)

	key := blake2s.Sum256(append([]byte("cookie--"), b.Public[:]...))
	aead, err := chacha20poly1305.NewX(key[:])
	if err != nil {
		t.Fatal(err)
	}
	if got := binary.LittleEndian.Uint32(reply[4:8]); got != 77 {
		t.Fatalf("receiver index %d", got)
	}
	cookie, err := aead.Open(nil, reply[8:32], reply[32:64], msg[116:132])
	if err != nil {
		t.Fatalf("reply does not decrypt as documented: %v", err)
	}
	if len(cookie) != 16 {
		t.Fatalf("cookie is %d bytes", len(cookie))
	}
	if _, err := aead.Open(nil, reply[8:32], reply[32:64], nil); err == nil {
		t.Fatal("reply not bound to mac1")
	}
	retry := initiation(t, a, b, 77)
	jar.AddMAC2(retry)
	h, err := blake2s.New128(cookie)
	if err != nil {
		t.Fatal(err)
	}
	h.Write(retry[:132])
	if want := h.Sum(nil); !bytes.Equal(retry[132:], want) {
		t.Fatalf("mac2 %x, want BLAKE2s-128(cookie, msg[:132]) = %x", retry[132:], want)
	}
	// Only initiations and responses are accepted, even with a correct
	// mac2.
	for _, m := range [][]byte{make([]byte, InitiationSize), make([]byte, 100), make([]byte, ResponseSize)} {
		m[0] = MsgTransport
		h, _ := blake2s.New128(cookie)
		h.Write(m[:len(m)-16])
		copy(m[len(m)-16:], h.Sum(nil))
		if checker.CheckMAC2(m, cookieSrc) {
			t.Fatalf("accepted a %d-byte type %d message with a valid mac2", len(m), m[0])
		}
		m[0] = MsgInitiation
		if len(m) == InitiationSize {
			h, _ := blake2s.New128(cookie)
			h.Write(m[:len(m)-16])
			copy(m[len(m)-16:], h.Sum(nil))
			if !checker.CheckMAC2(m, cookieSrc) {
				t.Fatal("control: a hand-made initiation-shaped message was rejected")
			}
		}
	}
	// A second reply to the same message uses a fresh nonce.
	reply2, err := checker.CreateReply(msg, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(reply[8:32], reply2[8:32]) {
		t.Fatal("nonce reused")
	}
}

func TestCookieResponseDirection(t *testing.T) {
	// The initiator is the one under load: it answers a response with a
	// cookie reply and the responder retries with mac2.
	a, b, _, _, clk := cookieSetup(t)
	checkerA := NewCookieChecker(a.Public, detRand(60), clk.Now)
	jarB := NewCookieJar(a.Public, clk.Now)
	ri, err := b.ConsumeInitiation(initiation(t, a, b, 5))
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := b.CreateResponse(ri, 9, testNow)
	if err != nil {
		t.Fatal(err)
	}
	reply := obtainCookie(t, checkerA, jarB, resp, cookieSrc)
	if idx, _ := CookieReplyReceiverIndex(reply); idx != 9 {
		t.Fatalf("reply to a response names index %d, want the responder's 9", idx)
	}
	if len(reply) > len(resp) {
		t.Fatal("reply larger than response")
	}
	jarB.AddMAC2(resp)
	if !CheckMAC1(resp, a.Public) || !checkerA.CheckMAC2(resp, cookieSrc) {
		t.Fatal("response mac1/mac2 not accepted")
	}
	if checkerA.CheckMAC2(resp, cookieOtherPrt) {
		t.Fatal("response mac2 accepted from another port")
	}
}

func TestCookieSecretRotation(t *testing.T) {
	a, b, checker, jar, clk := cookieSetup(t)
	msg := initiation(t, a, b, 1)
	obtainCookie(t, checker, jar, msg, cookieSrc) // secret born now
	jar.AddMAC2(msg)
	steps := []struct {
		advance time.Duration
		want    bool
	}{
		{0, true},
		{119 * time.Second, true},  // 119 s: same secret
		{11 * time.Second, true},   // 130 s: rotated once, previous accepted
		{109 * time.Second, true},  // 239 s: still the previous secret
		{1 * time.Second, false},   // 240 s: rotated twice, gone
		{500 * time.Second, false}, // long idle
	}
	for _, s := range steps {
		clk.Advance(s.advance)
		if got := checker.CheckMAC2(msg, cookieSrc); got != s.want {
			t.Fatalf("at %v: CheckMAC2 = %v, want %v", clk.Now().Sub(testNow), got, s.want)
		}
	}

	// A cookie issued just before a rotation survives it, and a new
	// cookie works after a long idle gap.
	_, b2, checker2, jar2, clk2 := cookieSetup(t)
	msg2 := initiation(t, a, b2, 2)
	checker2.CheckMAC2(msg2, cookieSrc) // secret born at 0
	clk2.Advance(119 * time.Second)
	obtainCookie(t, checker2, jar2, msg2, cookieSrc)
	jar2.AddMAC2(msg2)
	clk2.Advance(2 * time.Second) // 121 s: rotated
	if !checker2.CheckMAC2(msg2, cookieSrc) {
		t.Fatal("cookie issued 2 s before rotation rejected after it")
	}
	clk2.Advance(119 * time.Second) // 240 s
	if checker2.CheckMAC2(msg2, cookieSrc) {
		t.Fatal("cookie accepted two rotations later")
	}
	// Without checks in between, a cookie is still dead 250 s later: the
	// rotation schedule must not turn a secret older than two periods
	// into "previous".
	_, b3, checker3, jar3, clk3 := cookieSetup(t)
	msg3 := initiation(t, a, b3, 4)
	obtainCookie(t, checker3, jar3, msg3, cookieSrc)
	jar3.AddMAC2(msg3)
	clk3.Advance(250 * time.Second)
	if checker3.CheckMAC2(msg3, cookieSrc) {
		t.Fatal("cookie accepted after 250 s without intermediate checks")
	}

	clk2.Advance(time.Hour)
	fresh := initiation(t, a, b2, 3)
	obtainCookie(t, checker2, jar2, fresh, cookieSrc)
	jar2.AddMAC2(fresh)
	if !checker2.CheckMAC2(fresh, cookieSrc) {
		t.Fatal("new cookie after idle gap rejected")
	}
	// A clock that goes backwards drops the secrets rather than keeping
	// them alive.
	clk2.Advance(-time.Second)
	if checker2.CheckMAC2(fresh, cookieSrc) {
		t.Fatal("cookie accepted after the clock went backwards")
	}
}

func TestCookieJarLifetime(t *testing.T) {
	a, b, checker, jar, clk := cookieSetup(t)
	obtainCookie(t, checker, jar, initiation(t, a, b, 1), cookieSrc)
	clk.Advance(114 * time.Second)
	msg := initiation(t, a, b, 1)
	jar.AddMAC2(msg)
	if zeroMAC2(msg) || !checker.CheckMAC2(msg, cookieSrc) {
		t.Fatal("cookie not used at 114 s")
	}
	clk.Advance(time.Second)
	jar.AddMAC2(msg)
	if !zeroMAC2(msg) {
		t.Fatal("cookie still used at 115 s")
	}
	// A garbage mac2 is cleared when there is no usable cookie.
	for i := initMAC2Off; i < InitiationSize; i++ {
		msg[i] = 0xff
	}
	jar.AddMAC2(msg)
	if !zeroMAC2(msg) {
		t.Fatal("stale mac2 not cleared")
	}
	// A clock going backwards does not revive or keep a cookie.
	_, _, checker2, jar2, clk2 := cookieSetup(t)
	obtainCookie(t, checker2, jar2, initiation(t, a, b, 1), cookieSrc)
	clk2.Advance(-time.Second)
	jar2.AddMAC2(msg)
	if !zeroMAC2(msg) {
		t.Fatal("cookie used with a clock before its receive time")
	}
}

func TestCookieReplyTampered(t *testing.T) {
	a, b, checker, jar, _ := cookieSetup(t)
	msg := initiation(t, a, b, 0xa1b2c3d4)
	jar.Sent(msg)
	reply, err := checker.CreateReply(msg, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	for i := range reply {
		for _, bit := range []byte{0x01, 0x80} {
			bad := bytes.Clone(reply)
			bad[i] ^= bit
			err := jar.ConsumeReply(bad)
			var want error
			switch {
			case i == 0:
				want = ErrMessageType
			case i < 4:
				want = ErrReserved
			case i < 8:
				want = ErrIndexMismatch
			default:
				want = ErrCookie
			}
			if !errors.Is(err, want) {
				t.Fatalf("byte %d bit %#x: err %v, want %v", i, bit, err, want)
			}
		}
	}
	// The failures did not spend the pending message.
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("genuine reply after forgeries: %v", err)
	}
	// Each sent message is answered once.
	if err := jar.ConsumeReply(reply); !errors.Is(err, ErrCookie) {
		t.Fatalf("replayed reply: %v", err)
	}
}

func TestCookieReplyBoundToMAC1(t *testing.T) {
	a, b, checker, _, clk := cookieSetup(t)
	msgA := initiation(t, a, b, 42)
	msgB := initiation(t, a, b, 42) // same index, different ephemeral, different mac1
	if bytes.Equal(msgA[initMAC1Off:initMAC2Off], msgB[initMAC1Off:initMAC2Off]) {
		t.Fatal("test needs two different mac1 values")
	}
	replyB, err := checker.CreateReply(msgB, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}

	jar := NewCookieJar(b.Public, clk.Now)
	if err := jar.ConsumeReply(replyB); !errors.Is(err, ErrCookie) {
		t.Fatalf("reply with nothing sent: %v", err)
	}
	jar.Sent(msgA)
	if err := jar.ConsumeReply(replyB); !errors.Is(err, ErrCookie) {
		t.Fatalf("reply to another mac1: %v", err)
	}
	// Sending a newer message supersedes the old one.
	replyA, err := checker.CreateReply(msgA, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	jar.Sent(msgB)
	if err := jar.ConsumeReply(replyA); !errors.Is(err, ErrCookie) {
		t.Fatalf("reply to a superseded message: %v", err)
	}
	if err := jar.ConsumeReply(replyB); err != nil {
		t.Fatalf("reply to the current message: %v", err)
	}
	// The jar must be keyed with the checker's public key.
	wrong := NewCookieJar(a.Public, clk.Now)
	wrong.Sent(msgA)
	if err := wrong.ConsumeReply(replyA); !errors.Is(err, ErrCookie) {
		t.Fatalf("reply decrypted with another peer's key: %v", err)
	}
}

func TestCookieSizesAndTypes(t *testing.T) {
	a, b, checker, jar, _ := cookieSetup(t)
	msg := initiation(t, a, b, 3)
	jar.Sent(msg)
	reply, err := checker.CreateReply(msg, cookieSrc)
	if err != nil {
		t.Fatal(err)
	}
	mod := func(b []byte, i int, v byte) []byte { b = bytes.Clone(b); b[i] = v; return b }

	for _, tc := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"nil", nil, ErrMessageSize},
		{"short", reply[:CookieReplySize-1], ErrMessageSize},
		{"long", append(bytes.Clone(reply), 0), ErrMessageSize},
		{"initiation", msg, ErrMessageSize},
		{"type 1", mod(reply, 0, MsgInitiation), ErrMessageType},
		{"type 4", mod(reply, 0, MsgTransport), ErrMessageType},
		{"reserved", mod(reply, 3, 1), ErrReserved},
	} {
		if err := jar.ConsumeReply(tc.b); !errors.Is(err, tc.err) {
			t.Errorf("ConsumeReply(%s) = %v, want %v", tc.name, err, tc.err)
		}
		if _, ok := CookieReplyReceiverIndex(tc.b); ok {
			t.Errorf("CookieReplyReceiverIndex(%s) ok", tc.name)
		}
	}

	transport := make([]byte, InitiationSize)
	transport[0] = MsgTransport
	for _, tc := range []struct {
		name string
		b    []byte
		err  error
	}{
		{"nil", nil, ErrMessageSize},
		{"short initiation", msg[:InitiationSize-1], ErrMessageSize},
		{"cookie reply", reply, ErrMessageSize},
		{"transport of initiation size", transport, ErrMessageType},
		{"initiation typed as response", mod(msg, 0, MsgResponse), ErrMessageType},
		{"reserved", mod(msg, 2, 9), ErrReserved},
	} {
		if _, err := checker.CreateReply(tc.b, cookieSrc); !errors.Is(err, tc.err) {
			t.Errorf("CreateReply(%s) = %v, want %v", tc.name, err, tc.err)
		}
		if checker.CheckMAC2(tc.b, cookieSrc) {
			t.Errorf("CheckMAC2(%s) = true", tc.name)
		}
		// Neither jar method touches something that is not a
		// handshake message.
		before := bytes.Clone(tc.b)
		jar.Sent(tc.b)
		jar.AddMAC2(tc.b)
		if !bytes.Equal(before, tc.b) {
			t.Errorf("AddMAC2(%s) modified it", tc.name)
		}
	}
	// The ignored Sent calls did not replace the pending message.
	if err := jar.ConsumeReply(reply); err != nil {
		t.Fatalf("ConsumeReply after ignored Sent calls: %v", err)
	}
}

func TestCookieNoAmplification(t *testing.T) {
	a, b, checker, _, _ := cookieSetup(t)
	init := initiation(t, a, b, 1)
	ri, err := b.ConsumeInitiation(init)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := b.CreateResponse(ri, 2, testNow)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range [][]byte{init, resp} {
		reply, err := checker.CreateReply(m, cookieSrc)
		if err != nil {
			t.Fatal(err)
		}
		if len(reply) != CookieReplySize || len(reply) > len(m) {
			t.Fatalf("%d-byte reply to a %d-byte message", len(reply), len(m))
		}
	}
	if CookieReplySize > ResponseSize || CookieReplySize > InitiationSize {
		t.Fatal("CookieReplySize larger than a handshake message")
	}
}

func TestCookieSourceAddresses(t *testing.T) {
	a, b, checker, jar, _ := cookieSetup(t)
	v4 := netip.MustParseAddrPort("198.51.100.7:1000")
	mapped := netip.AddrPortFrom(netip.AddrFrom16(v4.Addr().As16()), 1000)
	v6 := netip.MustParseAddrPort("[2001:db8::7]:1000")
	zoned := netip.MustParseAddrPort("[fe80::1%eth0]:1000")

	msg := initiation(t, a, b, 1)
	obtainCookie(t, checker, jar, msg, mapped)
	jar.AddMAC2(msg)
	if !checker.CheckMAC2(msg, v4) || !checker.CheckMAC2(msg, mapped) {
		t.Fatal("IPv4 and IPv4-mapped sources not treated alike")
	}

	msg6 := initiation(t, a, b, 2)
	obtainCookie(t, checker, jar, msg6, v6)
	jar.AddMAC2(msg6)
	if !checker.CheckMAC2(msg6, v6) || checker.CheckMAC2(msg6, v4) {
		t.Fatal("IPv6 source")
	}
	msgZ := initiation(t, a, b, 3)
	obtainCookie(t, checker, jar, msgZ, zoned)
	jar.AddMAC2(msgZ)
	if !checker.CheckMAC2(msgZ, zoned) {
		t.Fatal("zoned IPv6 source")
	}

	if _, err := checker.CreateReply(msg, netip.AddrPort{}); !errors.Is(err, ErrAddress) {
		t.Fatalf("CreateReply with invalid source: %v", err)
	}
	if checker.CheckMAC2(msg, netip.AddrPort{}) {
		t.Fatal("CheckMAC2 with invalid source")
	}
}

func TestCookieRandomFailure(t *testing.T) {
	a, b, _, _, clk := cookieSetup(t)
	msg := initiation(t, a, b, 1)

	broken := NewCookieChecker(b.Public, io.LimitReader(detRand(1), 0), clk.Now)
	if _, err := broken.CreateReply(msg, cookieSrc); !errors.Is(err, ErrRandom) || !errors.Is(err, io.EOF) {
		t.Fatalf("CreateReply with no randomness for the secret: %v", err)
	}
	if broken.CheckMAC2(msg, cookieSrc) {
		t.Fatal("CheckMAC2 true without a secret")
	}
	// Enough for the secret, not for a nonce.
	short := NewCookieChecker(b.Public, io.LimitReader(detRand(1), 40), clk.Now)
	if _, err := short.CreateReply(msg, cookieSrc); !errors.Is(err, ErrRandom) {
		t.Fatalf("CreateReply with no randomness for the nonce: %v", err)
	}

	// A rotation that cannot read a new secret must not keep accepting
	// cookies made with the expired one.
	r := &switchReader{r: detRand(3)}
	checker := NewCookieChecker(b.Public, r, clk.Now)
	jar := NewCookieJar(b.Public, clk.Now)
	obtainCookie(t, checker, jar, msg, cookieSrc)
	jar.AddMAC2(msg)
	clk.Advance(250 * time.Second)
	r.fail = true
	if checker.CheckMAC2(msg, cookieSrc) {
		t.Fatal("expired cookie accepted while the random source fails")
	}
}

// switchReader fails once fail is set.
type switchReader struct {
	r    io.Reader
	fail bool
}

func (s *switchReader) Read(p []byte) (int, error) {
	if s.fail {
		return 0, io.ErrUnexpectedEOF
	}
	return s.r.Read(p)
}

func TestCookieNilDefaults(t *testing.T) {
	a, b, _, _, _ := cookieSetup(t)
	checker := NewCookieChecker(b.Public, nil, nil)
	jar := NewCookieJar(b.Public, nil)
	msg := initiation(t, a, b, 1)
	obtainCookie(t, checker, jar, msg, cookieSrc)
	jar.AddMAC2(msg)
	if !checker.CheckMAC2(msg, cookieSrc) {
		t.Fatal("round trip with crypto/rand and time.Now failed")
	}
}

func TestCookieConcurrent(t *testing.T) {
	a, b, _, _, clk := cookieSetup(t)
	checker := NewCookieChecker(b.Public, nil, clk.Now) // crypto/rand is safe for concurrent use
	jar := NewCookieJar(b.Public, clk.Now)
	var msgs [][]byte
	for i := range 4 {
		msgs = append(msgs, initiation(t, a, b, uint32(i)))
	}

	const workers, rounds = 8, 200
	var wg sync.WaitGroup
	stop := make(chan struct{})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Second)
			}
		}
	}()
	var workersWG sync.WaitGroup
	for w := range workers {
		workersWG.Add(1)
		go func() {
			defer workersWG.Done()
			src := netip.AddrPortFrom(cookieSrc.Addr(), uint16(1000+w))
			for i := range rounds {
				m := bytes.Clone(msgs[(w+i)%len(msgs)])
				jar.AddMAC2(m)
				jar.Sent(m)
				checker.CheckMAC2(m, src)
				reply, err := checker.CreateReply(m, src)
				if err != nil {
					t.Error(err)
					return
				}
				if _, ok := CookieReplyReceiverIndex(reply); !ok {
					t.Error("bad reply")
					return
				}
				// Other workers' Sent calls race with this one, so
				// only well-defined errors are allowed.
				if err := jar.ConsumeReply(reply); err != nil && !errors.Is(err, ErrCookie) && !errors.Is(err, ErrIndexMismatch) {
					t.Errorf("ConsumeReply: %v", err)
					return
				}
			}
		}()
	}
	workersWG.Wait()
	close(stop)
	wg.Wait()

	// The shared objects still work.
	m := bytes.Clone(msgs[0])
	obtainCookie(t, checker, jar, m, cookieSrc)
	jar.AddMAC2(m)
	if !checker.CheckMAC2(m, cookieSrc) {
		t.Fatal("round trip after concurrent use failed")
	}
}

func BenchmarkCheckMAC2(b *testing.B) {
	a, r, checker, jar, _ := cookieSetup(b)
	msg := initiation(b, a, r, 1)
	obtainCookie(b, checker, jar, msg, cookieSrc)
	jar.AddMAC2(msg)
	b.ReportAllocs()
	for b.Loop() {
		if !checker.CheckMAC2(msg, cookieSrc) {
			b.Fatal("rejected")
		}
	}
}

func BenchmarkCreateReply(b *testing.B) {
	a, r, _, _, clk := cookieSetup(b)
	checker := NewCookieChecker(r.Public, nil, clk.Now)
	msg := initiation(b, a, r, 1)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := checker.CreateReply(msg, cookieSrc); err != nil {
			b.Fatal(err)
		}
	}
}
