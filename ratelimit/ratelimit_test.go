package ratelimit

import (
	"math"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// clock is a hand-moved clock, safe for concurrent use.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

var (
	ipA = netip.MustParseAddr("192.0.2.1")
	ipB = netip.MustParseAddr("192.0.2.2")
)

// allowN calls Allow n times and returns how many were allowed.
func allowN(l *Limiter, ip netip.Addr, n int) int {
	got := 0
	for range n {
		if l.Allow(ip) {
			got++
		}
	}
	return got
}

func TestBurstThenRefuse(t *testing.T) {
	clk := newClock()
	l := New(20, 5, 100, clk.Now)
	for i := range 5 {
		if !l.Allow(ipA) {
			t.Fatalf("message %d of the burst refused", i+1)
		}
	}
	if l.Allow(ipA) {
		t.Fatal("message beyond the burst allowed")
	}
	if got := allowN(l, ipA, 10); got != 0 {
		t.Fatalf("%d more allowed without time passing", got)
	}
	if s := l.Stats(); s.Limited != 11 || s.Evicted != 0 {
		t.Fatalf("stats %+v", s)
	}
}

func TestRefillAtRate(t *testing.T) {
	clk := newClock()
	l := New(20, 5, 100, clk.Now) // one token per 50 ms
	allowN(l, ipA, 5)
	clk.Advance(49 * time.Millisecond)
	if l.Allow(ipA) {
		t.Fatal("allowed before a token refilled")
	}
	clk.Advance(1 * time.Millisecond)
	if !l.Allow(ipA) {
		t.Fatal("refused after one token refilled")
	}
	if l.Allow(ipA) {
		t.Fatal("second message allowed after one token")
	}
	// Steady state: over 10 s exactly rate*10 messages get through.
	got := 0
	for range 1000 {
		clk.Advance(10 * time.Millisecond)
		got += allowN(l, ipA, 3)
	}
	if got != 200 {
		t.Fatalf("%d allowed in 10 s at 20/s", got)
	}
	// A long pause refills the bucket to burst, not beyond.
	clk.Advance(time.Hour)
	if got := allowN(l, ipA, 100); got != 5 {
		t.Fatalf("%d allowed after a long pause, want burst 5", got)
	}
}

func TestSourcesIndependent(t *testing.T) {
	clk := newClock()
	l := New(1, 2, 100, clk.Now)
	if got := allowN(l, ipA, 10); got != 2 {
		t.Fatalf("A: %d allowed", got)
	}
	if got := allowN(l, ipB, 10); got != 2 {
		t.Fatalf("B limited by A: %d allowed", got)
	}
	if l.Len() != 2 {
		t.Fatalf("Len %d", l.Len())
	}
}

func TestIPv6Prefix(t *testing.T) {
	clk := newClock()
	l := New(1, 3, 100, clk.Now)
	same := []string{"2001:db8:1:2::1", "2001:db8:1:2::2", "2001:db8:1:2:ffff:ffff:ffff:ffff"}
	for _, s := range same {
		if !l.Allow(netip.MustParseAddr(s)) {
			t.Fatalf("%s refused", s)
		}
	}
	if l.Allow(netip.MustParseAddr("2001:db8:1:2:abcd::9")) {
		t.Fatal("same /64 did not share a bucket")
	}
	if !l.Allow(netip.MustParseAddr("2001:db8:1:3::1")) {
		t.Fatal("neighbouring /64 limited")
	}
	if !l.Allow(netip.MustParseAddr("fe80::1%eth0")) {
		t.Fatal("link-local refused")
	}
	if l.Len() != 3 {
		t.Fatalf("Len %d, want 3", l.Len())
	}
	// An IPv4 address and an IPv6 /64 whose 64 bits equal it differ.
	l2 := New(1, 1, 100, clk.Now)
	if !l2.Allow(netip.MustParseAddr("10.0.0.1")) || !l2.Allow(netip.MustParseAddr("0:0:a00:1::5")) {
		t.Fatal("IPv4 and IPv6 keys collide")
	}
}

func TestIPv4Mapped(t *testing.T) {
	clk := newClock()
	l := New(1, 2, 100, clk.Now)
	mapped := netip.AddrFrom16(ipA.As16())
	if !mapped.Is4In6() {
		t.Fatal("test address is not v4-mapped")
	}
	if !l.Allow(ipA) || !l.Allow(mapped) {
		t.Fatal("burst refused")
	}
	if l.Allow(ipA) || l.Allow(mapped) {
		t.Fatal("v4-mapped address has its own bucket")
	}
	// ::ffff:192.0.2.2 and 192.0.2.1 are still different sources
	// (mapped addresses must not be grouped by /64 like IPv6).
	if !l.Allow(netip.AddrFrom16(ipB.As16())) {
		t.Fatal("different v4-mapped address limited")
	}
	if l.Len() != 2 {
		t.Fatalf("Len %d", l.Len())
	}
}

// TestTableBound: a full table never refuses a newcomer: it evicts a
// tracked source, and stays at its bound.
func TestTableBound(t *testing.T) {
	clk := newClock()
	l := New(10, 2, 3, clk.Now)
	for i := range 3 {
		if !l.Allow(netip.AddrFrom4([4]byte{10, 0, 0, byte(i)})) {
			t.Fatalf("source %d refused", i)
		}
	}
	for i := range 4 {
		if !l.Allow(netip.AddrFrom4([4]byte{10, 0, 1, byte(i)})) {
			t.Fatalf("new source %d refused with a full table", i)
		}
	}
	if l.Len() != 3 {
		t.Fatalf("Len %d, want 3", l.Len())
	}
	if s := l.Stats(); s.Evicted != 4 || s.Limited != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// TestEvictionSparesLimited: a flood of new sources through a full table
// evicts sources with tokens to spare, not one that is over its rate, so
// the flood does not hand it a fresh burst.
func TestEvictionSparesLimited(t *testing.T) {
	clk := newClock()
	l := New(10, 5, 64, clk.Now)
	flooder := netip.MustParseAddr("10.9.9.9")
	for range 6 {
		l.Take(flooder)
	}
	for i := range 5000 {
		l.Allow(netip.AddrFrom4([4]byte{10, 1, byte(i >> 8), byte(i)}))
	}
	if got := l.Take(flooder); got != Limited {
		t.Fatalf("flooder after the flood: %v, want still Limited", got)
	}
	if l.Len() != 64 {
		t.Fatalf("Len %d, want 64", l.Len())
	}
}

// TestTakeVerdicts: Take tells a source over its own rate from an invalid
// address, and lets a newcomer into a full table.
func TestTakeVerdicts(t *testing.T) {
	clk := newClock()
	l := New(10, 2, 1, clk.Now)
	a := netip.MustParseAddr("10.0.0.1")
	for i, want := range []Verdict{Allowed, Allowed, Limited, Limited} {
		if got := l.Take(a); got != want {
			t.Fatalf("take %d: %v, want %v", i, got, want)
		}
	}
	if got := l.Take(netip.Addr{}); got != Untracked {
		t.Fatalf("invalid address: %v, want Untracked", got)
	}
	clk.Advance(100 * time.Millisecond)
	if got := l.Take(a); got != Allowed {
		t.Fatalf("after refill: %v, want Allowed", got)
	}
	if got := l.Take(netip.MustParseAddr("10.0.0.2")); got != Allowed {
		t.Fatalf("newcomer with a full table: %v, want Allowed (evicting)", got)
	}
}

func TestGC(t *testing.T) {
	clk := newClock()
	// rate 20, burst 5: refill takes 250 ms, so the idle limit is 1 s.
	l := New(20, 5, 100, clk.Now)
	l.Allow(ipA)
	clk.Advance(500 * time.Millisecond)
	l.Allow(ipB)
	clk.Advance(499 * time.Millisecond)
	l.GC()
	if l.Len() != 2 {
		t.Fatalf("GC dropped an entry idle for < 1 s: Len %d", l.Len())
	}
	clk.Advance(time.Millisecond) // A idle 1 s, B 0.5 s
	l.GC()
	if l.Len() != 1 {
		t.Fatalf("Len %d after A went idle, want 1", l.Len())
	}
	// B is still limited by its own history.
	if got := allowN(l, ipB, 10); got != 5 {
		// 4 tokens left + 500 ms of refill (capped at 5)
		t.Fatalf("B: %d allowed", got)
	}
	// Slow rate: idle limit is the full refill time, 5 s at 1/s.
	slow := New(1, 5, 100, clk.Now)
	allowN(slow, ipA, 5)
	clk.Advance(4 * time.Second)
	slow.GC()
	if slow.Len() != 1 {
		t.Fatal("slow-rate entry dropped before its bucket refilled")
	}
	clk.Advance(time.Second)
	slow.GC()
	if slow.Len() != 0 {
		t.Fatal("slow-rate entry kept after its bucket refilled")
	}
	// Zero rate: never refills, kept for the 1 h cap.
	zero := New(0, 1, 100, clk.Now)
	zero.Allow(ipA)
	clk.Advance(59 * time.Minute)
	zero.GC()
	if zero.Len() != 1 || zero.Allow(ipA) {
		t.Fatal("zero-rate entry refilled or dropped early")
	}
	clk.Advance(time.Hour)
	zero.GC()
	if zero.Len() != 0 {
		t.Fatal("zero-rate entry kept beyond the cap")
	}
}

func TestClockBackwards(t *testing.T) {
	clk := newClock()
	l := New(20, 2, 100, clk.Now)
	allowN(l, ipA, 2)
	clk.Advance(-time.Hour)
	if l.Allow(ipA) {
		t.Fatal("clock going back refilled the bucket")
	}
	// Time must pass again relative to the last update, not to the
	// earlier reading.
	clk.Advance(time.Hour + 50*time.Millisecond)
	if got := allowN(l, ipA, 5); got != 1 {
		t.Fatalf("%d allowed 50 ms after the last update, want 1", got)
	}
	l.GC() // no panic, entry recent
	if l.Len() != 1 {
		t.Fatal("recent entry dropped")
	}
}

func TestOddParameters(t *testing.T) {
	clk := newClock()
	for _, tc := range []struct {
		rate       float64
		burst, max int
	}{
		{math.NaN(), 0, 0},
		{-1, -5, -1},
		{math.Inf(1), 1, 1},
		{0, 1, 1},
		{1e-300, 1 << 40, 1},
	} {
		l := New(tc.rate, tc.burst, tc.max, clk.Now)
		if !l.Allow(ipA) {
			t.Fatalf("%+v: first message refused", tc)
		}
		l.Allow(ipB)
		l.GC()
		if l.Len() > 1 {
			t.Fatalf("%+v: Len %d beyond max", tc, l.Len())
		}
	}
	l := New(1, 1, 10, nil) // real clock
	if !l.Allow(ipA) || l.Allow(ipA) {
		t.Fatal("default clock")
	}
	if l.Allow(netip.Addr{}) {
		t.Fatal("invalid address allowed")
	}
	if l.Len() != 1 {
		t.Fatal("invalid address tracked")
	}
}

func TestConcurrentAllow(t *testing.T) {
	clk := newClock()
	const burst, workers, calls = 50, 8, 200
	l := New(10, burst, 1000, clk.Now)
	var allowed atomic.Int64
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			other := netip.AddrFrom4([4]byte{10, 1, 0, byte(w)})
			for range calls {
				if l.Allow(ipA) {
					allowed.Add(1)
				}
				l.Allow(other)
			}
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		for range 50 {
			l.GC()
			_ = l.Len()
			_ = l.Stats()
		}
	}()
	wg.Wait()
	// With the clock stopped, the shared source gets exactly its burst.
	if got := allowed.Load(); got != burst {
		t.Fatalf("%d allowed for one source, want %d", got, burst)
	}
	if s := l.Stats(); s.Limited != 2*workers*calls-burst-workers*burst {
		t.Fatalf("stats %+v", s)
	}

	// And with the clock moving concurrently.
	l2 := New(1000, 10, 1000, clk.Now)
	wg.Add(1)
	stop := make(chan struct{})
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
				clk.Advance(time.Millisecond)
			}
		}
	}()
	var wg2 sync.WaitGroup
	for w := range workers {
		wg2.Add(1)
		go func() {
			defer wg2.Done()
			ip := netip.AddrFrom4([4]byte{10, 2, 0, byte(w % 3)})
			for range calls {
				l2.Allow(ip)
			}
			l2.GC()
		}()
	}
	wg2.Wait()
	close(stop)
	wg.Wait()
}

func TestAllowDoesNotAllocate(t *testing.T) {
	clk := newClock()
	l := New(1e9, 5, 100, clk.Now)
	v4 := netip.MustParseAddr("198.51.100.1")
	v6 := netip.MustParseAddr("2001:db8::1")
	l.Allow(v4)
	l.Allow(v6)
	for _, ip := range []netip.Addr{v4, v6} {
		if n := testing.AllocsPerRun(1000, func() {
			clk.Advance(time.Microsecond)
			l.Allow(ip)
		}); n != 0 {
			t.Fatalf("Allow(%v) allocates %v times", ip, n)
		}
	}
}

// benchLimiter returns a limiter with 1024 known sources.
func benchLimiter() (*Limiter, []netip.Addr) {
	l := New(20, 5, 65536, time.Now)
	ips := make([]netip.Addr, 1024)
	for i := range ips {
		ips[i] = netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)})
		l.Allow(ips[i])
	}
	return l, ips
}

func BenchmarkAllow(b *testing.B) {
	l, ips := benchLimiter()
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		l.Allow(ips[i&1023])
		i++
	}
}

func BenchmarkAllowParallel(b *testing.B) {
	l, ips := benchLimiter()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			l.Allow(ips[i&1023])
			i++
		}
	})
}

// BenchmarkAllowNewSources measures inserting sources (and refusing them
// once the table is full).
func BenchmarkAllowNewSources(b *testing.B) {
	l := New(20, 5, 65536, time.Now)
	b.ReportAllocs()
	var i uint32
	for b.Loop() {
		l.Allow(netip.AddrFrom4([4]byte{byte(i >> 24), byte(i >> 16), byte(i >> 8), byte(i)}))
		i++
	}
}
