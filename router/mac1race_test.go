package router

import (
	"sync"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestMAC1ChecksConcurrentLoops: several outside loops (lanes, the
// express spill loop) check mac1 at the same time, each on its own
// batch. A checker shared between them is a data race on its BLAKE2s
// state (run with -race), and a torn state refuses good messages or
// passes bad ones. Each loop must have its own checker.
func TestMAC1ChecksConcurrentLoops(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	peerB := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	h.a.hs.initiate(peerB, h.now, false)
	good := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	bad := append([]byte(nil), good...)
	bad[len(bad)-17] ^= 1 // the last byte of mac1
	from := h.bindA.local

	const loops, rounds = 4, 200
	var wg sync.WaitGroup
	for range loops {
		b := h.b.newOutsideBatch()
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range rounds {
				b.sizes[0] = copy(b.bufs[0][:cap(b.bufs[0])], good)
				b.eps[0] = from
				b.sizes[1] = copy(b.bufs[1][:cap(b.bufs[1])], bad)
				b.eps[1] = from
				h.b.receiveBatch(b, 2, h.now)
				// Return what reached the handshake queue, so good
				// messages keep finding a free slot.
				for {
					select {
					case m := <-h.b.hs.queue:
						h.b.hs.free <- m
						continue
					default:
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	if got := h.b.drops.Get(Outside, ReasonBadMAC); got != loops*rounds {
		t.Errorf("bad_mac %d, want %d (one per round per loop): a good mac1 refused or a bad one passed", got, loops*rounds)
	}
}
