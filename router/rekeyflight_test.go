package router

import (
	"context"
	"net/netip"
	"runtime"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// dropInitBind is a Bind that drops every datagram it is asked to send
// and counts the handshake initiations among them: a peer whose
// responses never come back. Safe for concurrent use.
type dropInitBind struct {
	local netip.AddrPort
	mu    sync.Mutex
	inits int
	sent  int
}

func (b *dropInitBind) Receive([][]byte, []int, []netip.AddrPort) (int, error) { return 0, nil }
func (b *dropInitBind) Send(bufs [][]byte, _ netip.AddrPort) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, m := range bufs {
		if len(m) > 0 && m[0] == bhcrypto.MsgInitiation {
			b.inits++
		}
		b.sent++
	}
	return nil
}
func (b *dropInitBind) BatchSize() int            { return 64 }
func (b *dropInitBind) LocalAddr() netip.AddrPort { return b.local }
func (b *dropInitBind) Close() error              { return nil }

func (b *dropInitBind) counts() (inits, sent int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.inits, b.sent
}

// TestRekeyInFlightTriggersOnce: while an initiation of ours goes
// unanswered, the data path does not wake the handshake loop for every
// packet: 10k packets make a handful of triggers, not thousands (issue
// #19, item 8). Both cases: a session due for rekeying (packets still go
// out on it) and no session at all (packets wait in the queue).
func TestRekeyInFlightTriggersOnce(t *testing.T) {
	for _, tc := range []struct {
		name      string
		noSession bool
	}{
		{"rekey due", false},
		{"no session", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := newFakeClock()
			h := newHotPairClock(t, bhcrypto.AESGCM, clock)
			bind := &dropInitBind{local: h.bindA.local}
			h.a.bind = bind
			if tc.noSession {
				for _, p := range h.a.state.Load().peers {
					p.current.Store(nil)
				}
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { done <- h.a.hs.loop(ctx) }()
			defer func() {
				cancel()
				if err := <-done; err != nil {
					t.Error(err)
				}
			}()
			clock.Advance(h.a.set.rekeyAfter + 1) // also lets the loop's timers run once
			pkt := udpPacket(t, podA, podB, make([]byte, 100))
			in := h.a.newInsideBatch()
			const packets = 10000
			for range packets {
				copy(in.bufs[0][bufHeadroom:], pkt)
				in.sizes[0] = len(pkt)
				h.a.routeBatch(in, 1, clock.Now())
				// Packets come from the TUN one read at a time: let
				// the handshake loop run between them, as it would.
				runtime.Gosched()
			}
			deadline := time.Now().Add(2 * time.Second)
			for inits, _ := bind.counts(); inits == 0 && time.Now().Before(deadline); inits, _ = bind.counts() {
				time.Sleep(time.Millisecond) // the loop may still be sending
			}
			inits, sent := bind.counts()
			triggers := h.a.hs.count.triggers.Load()
			t.Logf("%d packets, initiation dropped: %d triggers, %d initiations, %d datagrams sent", packets, triggers, inits, sent)
			if !tc.noSession && sent < packets {
				t.Errorf("only %d of %d packets sent on the old session", sent, packets)
			}
			if triggers > 5 {
				t.Errorf("%d handshake triggers for %d packets, want a handful", triggers, packets)
			}
			if inits < 1 || inits > 2 {
				t.Errorf("%d initiations, want 1", inits)
			}
		})
	}
}
