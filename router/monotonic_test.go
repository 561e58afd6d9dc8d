package router

import (
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/clocktest"
)

// monoClock is a Clock on real time.Now() values, so they carry monotonic
// readings, moved by hand; the test may step its wall clock alone.
type monoClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *monoClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *monoClock) set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

func (c *monoClock) Ticker(time.Duration) (<-chan time.Time, func()) { return nil, func() {} }

// TestWallClockStep: a step of the wall clock (NTP) does not make a peer
// look silent (not ready, or down) or the loops look stuck (no watchdog
// ping): liveness, readiness and Healthy measure monotonic time.
func TestWallClockStep(t *testing.T) {
	clock := &monoClock{now: time.Now()}
	h := newHotPairClock(t, bhcrypto.AESGCM, clock)
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	t0 := clock.Now()
	// A sends to B (A now waits for an answer); B hears A.
	h.a.routeBatch(refill(in, udpPacket(t, podA, podB, []byte("x"))), 1, t0)
	out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
	out.eps[0] = h.bindA.local
	h.b.receiveBatch(out, 1, t0)
	h.a.hs.timers(t0)

	// One second later by the monotonic clock, the wall clock has
	// jumped an hour ahead.
	later := clocktest.WallStep(t, t0.Add(time.Second), time.Hour)
	clock.set(later)
	if err := h.a.Healthy(later); err != nil {
		t.Errorf("Healthy after a wall-clock step: %v", err)
	}
	if got := later.Sub(h.b.Peers()[0].LastReceive); got > 2*time.Second || got < 0 {
		t.Errorf("B heard A %s ago by the readiness clock, want 1s", got)
	}
	h.a.hs.timers(later)
	if h.a.Peers()[0].Down {
		t.Error("peer reported down after a wall-clock step")
	}
}
