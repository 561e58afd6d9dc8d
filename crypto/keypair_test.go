package crypto

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"
)

func TestOpenRejectsTamperingWithoutMovingWindow(t *testing.T) {
	for _, kind := range ciphers {
		t.Run(kind.String(), func(t *testing.T) {
			a, b := testKeypairs(t, kind)
			payload := []byte("0123456789abcdef0123456789abcdef")
			genuine := seal(t, a, payload)

			type tc struct {
				name string
				msg  []byte
			}
			var cases []tc
			for i := 0; i < TransportHeaderSize; i++ {
				m := bytes.Clone(genuine)
				m[i] ^= 0x01
				cases = append(cases, tc{fmt.Sprintf("header byte %d", i), m})
			}
			for _, i := range []int{TransportHeaderSize, TransportHeaderSize + 7, len(genuine) - TagSize, len(genuine) - 1} {
				m := bytes.Clone(genuine)
				m[i] ^= 0x80
				cases = append(cases, tc{fmt.Sprintf("body byte %d", i), m})
			}
			cases = append(cases,
				tc{"truncated by one", bytes.Clone(genuine[:len(genuine)-1])},
				tc{"tag only", bytes.Clone(genuine[:TransportOverhead])},
				tc{"shorter than overhead", bytes.Clone(genuine[:TransportOverhead-1])},
				tc{"extended", append(bytes.Clone(genuine), 0)},
			)
			for _, c := range cases {
				if _, _, err := b.Open(c.msg); err == nil {
					t.Fatalf("%s: Open accepted a modified message", c.name)
				}
			}
			// The window never saw the forgeries: the genuine packet with
			// the same counter is still accepted, once.
			pt, ctr, err := b.Open(bytes.Clone(genuine))
			if err != nil || !bytes.Equal(pt, payload) {
				t.Fatalf("genuine packet after forgeries: %v", err)
			}
			if !b.CheckReplay(ctr) {
				t.Fatal("genuine counter rejected after forgeries")
			}
			_, ctr, err = b.Open(bytes.Clone(genuine))
			if err != nil {
				t.Fatalf("replayed packet should still authenticate: %v", err)
			}
			if b.CheckReplay(ctr) {
				t.Fatal("replayed packet accepted by CheckReplay")
			}
		})
	}
}

func TestOpenErrors(t *testing.T) {
	a, b := testKeypairs(t, ChaChaPoly)
	genuine := seal(t, a, []byte("x"))
	mod := func(f func([]byte)) []byte { m := bytes.Clone(genuine); f(m); return m }
	tests := []struct {
		name string
		msg  []byte
		want error
	}{
		{"short", genuine[:TransportOverhead-1], ErrMessageSize},
		{"type", mod(func(m []byte) { m[0] = MsgResponse }), ErrMessageType},
		{"reserved", mod(func(m []byte) { m[2] = 1 }), ErrReserved},
		{"reserved 3", mod(func(m []byte) { m[3] = 1 }), ErrReserved},
		{"lane", mod(func(m []byte) { m[1] = 7 }), ErrAuth}, // authenticated
		{"receiver", mod(func(m []byte) { m[5] ^= 1 }), ErrIndexMismatch},
		{"counter limit", mod(func(m []byte) {
			for i := 8; i < 16; i++ {
				m[i] = 0xff
			}
		}), ErrCounterExhausted},
		{"counter", mod(func(m []byte) { m[8] ^= 1 }), ErrAuth},
		{"tag", mod(func(m []byte) { m[len(m)-1] ^= 1 }), ErrAuth},
	}
	for _, tc := range tests {
		if _, _, err := b.Open(tc.msg); err != tc.want {
			t.Errorf("%s: err %v, want %v", tc.name, err, tc.want)
		}
	}
}

func TestReorderedWithinWindow(t *testing.T) {
	a, b := testKeypairs(t, AESGCM)
	var pkts [][]byte
	for i := 0; i < 50; i++ {
		pkts = append(pkts, seal(t, a, []byte{byte(i)}))
	}
	order := []int{3, 0, 1, 49, 2, 10, 4, 48}
	for i := 5; i < 48; i++ {
		if i != 10 {
			order = append(order, i)
		}
	}
	for _, i := range order {
		pt, ctr, err := b.Open(bytes.Clone(pkts[i]))
		if err != nil || ctr != uint64(i) || pt[0] != byte(i) {
			t.Fatalf("packet %d: %v", i, err)
		}
		if !b.CheckReplay(ctr) {
			t.Fatalf("packet %d rejected", i)
		}
	}
	for i := range pkts {
		_, ctr, err := b.Open(bytes.Clone(pkts[i]))
		if err != nil || b.CheckReplay(ctr) {
			t.Fatalf("duplicate of packet %d accepted (err %v)", i, err)
		}
	}
}

func TestSealBuffer(t *testing.T) {
	a, b := testKeypairs(t, ChaChaPoly)
	// Exact capacity, zero length slice: Seal reslices within cap.
	buf := make([]byte, 0, TransportOverhead+5)
	copy(buf[:cap(buf)][TransportHeaderSize:], "hello")
	pkt, err := a.Seal(buf, 5)
	if err != nil || len(pkt) != TransportOverhead+5 || &pkt[0] != &buf[:1][0] {
		t.Fatalf("Seal: len %d err %v (or not in place)", len(pkt), err)
	}
	if pt, _, err := b.Open(pkt); err != nil || string(pt) != "hello" {
		t.Fatalf("Open: %q %v", pt, err)
	}
	for _, n := range []int{-1, 6, 1 << 40} {
		if _, err := a.Seal(make([]byte, 0, TransportOverhead+5), n); err != ErrBufferSize {
			t.Fatalf("Seal(plainLen=%d): err %v, want ErrBufferSize", n, err)
		}
	}
	if _, err := a.Seal(nil, 0); err != ErrBufferSize {
		t.Fatalf("Seal(nil): %v", err)
	}
	if a.SendCount() != 1 {
		t.Fatalf("SendCount %d, want 1 (failed Seals must not use counters)", a.SendCount())
	}
}

func TestSealCounterExhausted(t *testing.T) {
	a, b := testKeypairs(t, AESGCM)
	a.sendCounter.Store(RejectAfterMessages - 2)
	for i := 0; i < 2; i++ {
		pkt := seal(t, a, []byte("x"))
		if _, ctr, err := b.Open(pkt); err != nil || ctr != RejectAfterMessages-2+uint64(i) {
			t.Fatalf("last counters: ctr %d err %v", ctr, err)
		}
	}
	for i := 0; i < 3; i++ {
		if _, err := a.Seal(make([]byte, 64), 1); err != ErrCounterExhausted {
			t.Fatalf("Seal at limit: %v", err)
		}
	}
	if a.SendCount() != RejectAfterMessages {
		t.Fatalf("SendCount %d moved past the limit", a.SendCount())
	}
}

func TestConcurrentSealOpen(t *testing.T) {
	a, b := testKeypairs(t, ChaChaPoly)
	const workers, per = 8, 200
	var wg sync.WaitGroup
	var mu sync.Mutex
	seen := map[uint64]bool{}
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 256)
			for i := 0; i < per; i++ {
				pkt, err := a.Seal(buf, 100)
				if err != nil {
					t.Error(err)
					return
				}
				_, ctr, err := b.Open(pkt)
				if err != nil {
					t.Error(err)
					return
				}
				if !b.CheckReplay(ctr) {
					t.Errorf("counter %d rejected", ctr)
				}
				mu.Lock()
				if seen[ctr] {
					t.Errorf("counter %d used twice", ctr)
				}
				seen[ctr] = true
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if len(seen) != workers*per || a.SendCount() != workers*per {
		t.Fatalf("%d distinct counters, SendCount %d", len(seen), a.SendCount())
	}
}

func TestAllocs(t *testing.T) {
	for _, kind := range ciphers {
		a, b := testKeypairs(t, kind)
		buf := make([]byte, TransportOverhead+1420)
		pkt, _ := a.Seal(buf, 1420)
		wire := bytes.Clone(pkt)
		scratch := make([]byte, len(wire))
		var ctr uint64
		tests := map[string]func(){
			"Seal": func() {
				if _, err := a.Seal(buf, 1420); err != nil {
					panic(err)
				}
			},
			"Open": func() {
				copy(scratch, wire)
				if _, _, err := b.Open(scratch); err != nil {
					panic(err)
				}
			},
			"Open reject": func() {
				copy(scratch, wire)
				scratch[len(scratch)-1] ^= 1
				if _, _, err := b.Open(scratch); !errors.Is(err, ErrAuth) {
					panic(err)
				}
			},
			"CheckReplay": func() {
				ctr++
				b.CheckReplay(ctr)
			},
		}
		for name, f := range tests {
			if n := testing.AllocsPerRun(200, f); n != 0 {
				t.Errorf("%s %s: %v allocations per run, want 0", kind, name, n)
			}
		}
	}
}

// TestSealLane: the lane byte reaches the receiver in byte 1, opens like
// any message, and is authenticated.
func TestSealLane(t *testing.T) {
	for _, kind := range ciphers {
		a, b := testKeypairs(t, kind)
		for _, lane := range []byte{0, 1, 200, 255} {
			buf := make([]byte, TransportOverhead+5)
			copy(buf[TransportHeaderSize:], "hello")
			msg, err := a.SealLane(buf, 5, lane)
			if err != nil {
				t.Fatal(err)
			}
			if msg[1] != lane || msg[2]|msg[3] != 0 {
				t.Fatalf("%v: header % x, want lane %d", kind, msg[:4], lane)
			}
			m := bytes.Clone(msg)
			m[1] ^= 0x80
			if _, _, err := b.Open(m); err != ErrAuth {
				t.Errorf("%v lane %d: altered lane byte: err %v, want ErrAuth", kind, lane, err)
			}
			plain, _, err := b.Open(msg)
			if err != nil || string(plain) != "hello" {
				t.Errorf("%v lane %d: Open = %q, %v", kind, lane, plain, err)
			}
		}
	}
}

// TestReserveCounters: reservations are disjoint across goroutines and
// with Seal's own counters, stop short at RejectAfterMessages and then
// give nothing, and a message sealed at a reserved counter opens with it.
func TestReserveCounters(t *testing.T) {
	t.Run("disjoint", func(t *testing.T) {
		a, _ := testKeypairs(t, AESGCM)
		const workers, rounds, want = 4, 500, 7
		var mu sync.Mutex
		seen := map[uint64]bool{}
		var wg sync.WaitGroup
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range rounds {
					first, got := a.ReserveCounters(want)
					if got != want {
						t.Errorf("got %d counters, want %d", got, want)
						return
					}
					msg, err := a.Seal(make([]byte, TransportOverhead), 0)
					if err != nil {
						t.Error(err)
						return
					}
					_, sealed, _ := parseTransport(msg)
					mu.Lock()
					for c := first; c < first+uint64(got); c++ {
						if seen[c] {
							t.Errorf("counter %d handed out twice", c)
						}
						seen[c] = true
					}
					if seen[sealed] {
						t.Errorf("Seal used reserved counter %d", sealed)
					}
					seen[sealed] = true
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if n := uint64(len(seen)); n != workers*rounds*(want+1) || a.SendCount() != n {
			t.Fatalf("%d distinct counters, SendCount %d, want %d", n, a.SendCount(), workers*rounds*(want+1))
		}
	})
	for _, tc := range []struct {
		name        string
		start       uint64
		n, wantGot  int
		wantCounter uint64
	}{
		{"zero", 5, 0, 0, 5},
		{"negative", 5, -3, 0, 5},
		{"near the limit", RejectAfterMessages - 3, 8, 3, RejectAfterMessages},
		{"at the limit", RejectAfterMessages, 8, 0, RejectAfterMessages},
		{"one below", RejectAfterMessages - 1, 1, 1, RejectAfterMessages},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, _ := testKeypairs(t, AESGCM)
			a.sendCounter.Store(tc.start)
			first, got := a.ReserveCounters(tc.n)
			if got != tc.wantGot || (got > 0 && first != tc.start) {
				t.Fatalf("ReserveCounters(%d) at %d = %d, %d; want %d, %d", tc.n, tc.start, first, got, tc.start, tc.wantGot)
			}
			if a.SendCount() != tc.wantCounter {
				t.Fatalf("SendCount %d, want %d", a.SendCount(), tc.wantCounter)
			}
		})
	}
	t.Run("seal at", func(t *testing.T) {
		a, b := testKeypairs(t, ChaChaPoly)
		first, got := a.ReserveCounters(3)
		if got != 3 {
			t.Fatalf("got %d", got)
		}
		for _, c := range []uint64{first + 2, first} { // any order
			buf := make([]byte, TransportOverhead+5)
			copy(buf[TransportHeaderSize:], "hello")
			msg, err := a.SealLaneAt(buf, 5, 9, c)
			if err != nil {
				t.Fatal(err)
			}
			pt, ctr, err := b.Open(msg)
			if err != nil || ctr != c || string(pt) != "hello" || msg[1] != 9 {
				t.Fatalf("open: %q ctr %d (want %d) lane %d err %v", pt, ctr, c, msg[1], err)
			}
		}
		if _, err := a.SealLaneAt(make([]byte, TransportOverhead), 0, 0, RejectAfterMessages); err != ErrCounterExhausted {
			t.Fatalf("SealLaneAt at the limit: %v", err)
		}
		if _, err := a.SealLaneAt(make([]byte, 4), 1, 0, first+1); err != ErrBufferSize {
			t.Fatalf("SealLaneAt short buffer: %v", err)
		}
	})
}
