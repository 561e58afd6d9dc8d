package flooder

import (
	crand "crypto/rand"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func TestGarbagePacket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var random, runts, transport int
	var big, firstBytes = 0, map[byte]bool{}
	for i := range 8000 {
		b := GarbagePacket(rng, i)
		switch k := i % 8; {
		case k < 4:
			random++
			if len(b) < 1 || len(b) > 1400 {
				t.Fatalf("random packet %d: %d bytes", i, len(b))
			}
			if len(b) > 1000 {
				big++
			}
			firstBytes[b[0]] = true
		case k == 4:
			runts++
			if len(b) < 1 || len(b) > 3 {
				t.Fatalf("runt %d: %d bytes", i, len(b))
			}
		default:
			transport++
			if len(b) < 32 || len(b) > 1400 {
				t.Fatalf("transport-looking %d: %d bytes", i, len(b))
			}
			if b[0] != bhcrypto.MsgTransport || b[1] != 0 || b[2] != 0 || b[3] != 0 {
				t.Fatalf("transport-looking %d: header % x", i, b[:4])
			}
		}
	}
	if random != 4000 || runts != 1000 || transport != 3000 {
		t.Errorf("mix: %d random, %d runts, %d transport; want 4000, 1000, 3000", random, runts, transport)
	}
	// Sizes spread over 1..1400 and first bytes over most values.
	if big < 800 || len(firstBytes) < 200 {
		t.Errorf("random packets look little random: %d over 1000 bytes, %d first bytes", big, len(firstBytes))
	}
}

func TestBadMACInitiation(t *testing.T) {
	priv, err := bhcrypto.GeneratePrivateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.PublicKey()
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[string]bool{}
	for i := range 1000 {
		b := BadMACInitiation(rng)
		if len(b) != bhcrypto.InitiationSize {
			t.Fatalf("%d bytes, want %d", len(b), bhcrypto.InitiationSize)
		}
		if b[0] != bhcrypto.MsgInitiation || b[1] != 0 || b[2] != 0 || b[3] != 0 {
			t.Fatalf("header % x", b[:4])
		}
		var zero [16]byte
		if string(b[mac2Off:]) != string(zero[:]) {
			t.Fatalf("mac2 % x, want zero", b[mac2Off:])
		}
		if string(b[mac1Off:mac2Off]) == string(zero[:]) {
			t.Fatal("mac1 is zero")
		}
		// What the gateway checks first, before any queue or DH.
		if bhcrypto.CheckMAC1(b, pub) {
			t.Fatalf("message %d has a valid mac1", i)
		}
		seen[string(b[4:8])] = true
	}
	if len(seen) < 990 {
		t.Errorf("%d distinct sender indexes in 1000", len(seen))
	}
}

func TestFloodPool(t *testing.T) {
	for _, kind := range []string{Garbage, BadMAC} {
		p, err := pool(kind, 64, 7)
		if err != nil || len(p) != 64 {
			t.Fatalf("%s: %d packets, %v", kind, len(p), err)
		}
		again, _ := pool(kind, 64, 7)
		if string(p[10]) != string(again[10]) {
			t.Errorf("%s: the same seed gives different pools", kind)
		}
	}
	if _, err := pool("nonsense", 8, 1); err == nil {
		t.Error("unknown kind: no error")
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(1000, 10, t0)
	if n := b.take(t0, 5); n != 0 {
		t.Errorf("at start: took %d", n)
	}
	if n := b.take(t0.Add(4*time.Millisecond), 10); n != 4 {
		t.Errorf("after 4 ms at 1000/s: took %d, want 4", n)
	}
	if w := b.wait(3); w != 3*time.Millisecond {
		t.Errorf("wait(3) = %s, want 3ms", w)
	}
	// A second away: the bucket holds 10, the other 990 are lost.
	if n := b.take(t0.Add(1004*time.Millisecond), 100); n != 10 {
		t.Errorf("after a second: took %d, want the burst 10", n)
	}
	if math.Abs(b.lost-990) > 1e-6 {
		t.Errorf("lost %g, want 990", b.lost)
	}
}

// TestSendFlood sends a short flood to a loopback socket: no root needed.
func TestSend(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadBuffer(4 << 20)
	to := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	got := make(chan [2]int, 1)
	go func() {
		buf := make([]byte, 2000)
		n, bad := 0, 0
		for {
			conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			k, err := conn.Read(buf)
			if err != nil {
				got <- [2]int{n, bad}
				return
			}
			n++
			if k != 148 || buf[0] != 1 {
				bad++
			}
		}
	}()
	res, err := Send(Options{To: netip.AddrPortFrom(to.Addr(), to.Port()), PPS: 20000, Kind: BadMAC, Duration: 300 * time.Millisecond, Batch: 16, Seed: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	// 6000 due; allow a slow test machine.
	if res.Sent < 2000 || res.Sent > 6100 || res.Bytes != res.Sent*148 {
		t.Errorf("sent %d datagrams, %d bytes in %.3f s; want about 6000 of 148 bytes", res.Sent, res.Bytes, res.Seconds)
	}
	if r[0] == 0 || r[1] != 0 {
		t.Errorf("received %d datagrams, %d not a 148-byte initiation", r[0], r[1])
	}
	if _, err := Send(Options{To: netip.AddrPortFrom(to.Addr(), to.Port()), PPS: 0, Kind: BadMAC, Duration: time.Second}, nil); err == nil {
		t.Error("-pps 0: no error")
	}
}

func TestParseResult(t *testing.T) {
	out := "some warning\n{\"kind\":\"garbage\",\"to\":\"203.0.113.2:51820\",\"sent\":1200,\"seconds\":1.5,\"pps\":800}\n"
	r, err := ParseResult([]byte(out))
	if err != nil || r.Kind != Garbage || r.Sent != 1200 || r.PPS != 800 {
		t.Errorf("%+v, %v", r, err)
	}
	if _, err := ParseResult([]byte("flood-worker: connect: refused\n")); err == nil {
		t.Error("no result: no error")
	}
}

// TestWireSizes keeps the sizes repeated in packets.go in step with the
// crypto package's.
func TestWireSizes(t *testing.T) {
	if initiationSize != bhcrypto.InitiationSize {
		t.Errorf("initiationSize %d, crypto.InitiationSize %d", initiationSize, bhcrypto.InitiationSize)
	}
}

func FuzzParseResult(f *testing.F) {
	f.Add([]byte("some warning\n{\"kind\":\"garbage\",\"to\":\"203.0.113.2:51820\",\"sent\":1200,\"seconds\":1.5,\"pps\":800}\n"))
	f.Add([]byte("flood-worker: connect: refused\n"))
	f.Add([]byte("{\"kind\":\"\"}\n{\"kind\":\"badmac\"}"))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseResult(b)
		if err == nil && r.Kind == "" {
			t.Errorf("%q: a result without a kind", b)
		}
		r.CPUPct() // no panic, also for zero seconds
	})
}
