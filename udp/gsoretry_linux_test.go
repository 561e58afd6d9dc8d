//go:build linux

package udp

import (
	"net/netip"
	"sync"
	"testing"
	"time"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func newFakeClock() *fakeClock { return &fakeClock{t: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// TestGSORefusalRetries: in a namespace whose loopback MTU (1280) is
// below 1400-byte datagrams, the kernel refuses to segment them
// (EMSGSIZE). Their Send must still deliver them (plainly, fragmented),
// without turning GSO off for the bind: runs of smaller datagrams, which
// fit, are still segmented (they reach the GRO receiver coalesced), the
// 1400-byte runs are sent plainly until the retry period has passed, and
// segmented again after it once the path takes them (MTU raised).
func TestGSORefusalRetries(t *testing.T) {
	lowMTULoopback(t)
	clk := newFakeClock()
	a := listen(t, "127.0.0.1:0", Options{now: clk.Now})
	b := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	needOffloads(t, a)
	needOffloads(t, b)
	watchdog(t, b)
	big, small := numbered(20, 1400, 1400), numbered(20, 1000, 1000)
	// send sends out, checks that b gets it and reports whether any of it
	// arrived coalesced (sent segmented).
	send := func(step string, out [][]byte) bool {
		t.Helper()
		before := b.groRecv.coalesced
		if err := a.Send(out, b.LocalAddr()); err != nil {
			t.Fatalf("%s: Send: %v", step, err)
		}
		in := newBatch(len(out), 2048)
		if err := receiveN(b, in, len(out)); err != nil {
			t.Fatalf("%s: Receive: %v", step, err)
		}
		expect(t, in, out, a.LocalAddr())
		return b.groRecv.coalesced > before
	}

	if send("refused", big) {
		t.Error("1400-byte segments over a 1280-byte MTU arrived coalesced")
	}
	if !a.GSO() {
		t.Error("one refused segment size turned GSO off for the bind")
	}
	if !send("smaller", small) {
		t.Error("1000-byte runs, which fit the MTU, were not segmented after the refusal")
	}
	ip(t, "link", "set", "lo", "mtu", "65536")
	if send("before-retry", big) {
		t.Error("1400-byte runs were segmented again before the retry period passed")
	}
	clk.Add(gsoRetryAfter + time.Second)
	if !send("after-retry", big) {
		t.Error("1400-byte runs were not segmented again after the retry period, on a path that takes them")
	}
	if !send("steady", big) {
		t.Error("GSO did not stay on after the retry")
	}
}

// gsoShared returns send state shared as a bind with GSO shares it, on
// the clock now.
func gsoShared(now func() time.Time) *sendShared {
	sh := &sendShared{}
	sh.gso.on.Store(true)
	sh.gso.now = now
	return sh
}

// TestGSOGate drives a gate's cap through a fake clock: a refusal caps
// segments for gsoRetryAfter, a lower refusal lowers the cap and a higher
// one does not raise it, the cap lapses, and a gate off for good stays off.
func TestGSOGate(t *testing.T) {
	clk := newFakeClock()
	g := &gsoShared(clk.Now).gso
	steps := []struct {
		name  string
		do    func()
		limit int
	}{
		{"fresh", func() {}, maxGSOBytes},
		{"refused-1400", func() { g.lower(1399) }, 1399},
		{"later", func() { clk.Add(gsoRetryAfter / 2) }, 1399},
		{"refused-lower", func() { g.lower(1000) }, 1000},
		{"refused-higher", func() { g.lower(1200) }, 1000},
		{"not-yet", func() { clk.Add(gsoRetryAfter - time.Second) }, 1000},
		{"lapsed", func() { clk.Add(time.Second) }, maxGSOBytes},
		{"after-lapse", func() { g.lower(1300) }, 1300},
		{"off-for-good", func() { g.on.Store(false) }, 0},
		{"off-stays", func() { clk.Add(2 * gsoRetryAfter) }, 0},
	}
	for _, st := range steps {
		st.do()
		if got := g.maxSegment(); got != st.limit {
			t.Errorf("%s: limit %d, want %d", st.name, got, st.limit)
		}
	}
	if (*gsoGate)(nil).maxSegment() != 0 {
		t.Error("a nil gate allows GSO")
	}
}

// TestPathSegment asks the route MTU of loopback in a namespace of the
// test's own, IPv4 and IPv6.
func TestPathSegment(t *testing.T) {
	ownNetns(t, []string{"link", "set", "lo", "mtu", "1500"})
	for _, c := range []struct {
		ep, local string
		want      int
	}{
		{"127.0.0.1:9", "0.0.0.0:0", 1500 - 28},
		{"127.0.0.1:9", "127.0.0.1:0", 1500 - 28},
		{"127.0.0.1:9", "[::]:0", 1500 - 28},
		{"[::1]:9", "[::]:0", 1500 - 48},
	} {
		got, ok := pathSegment(netip.MustParseAddrPort(c.ep), netip.MustParseAddrPort(c.local))
		if !ok || got != c.want {
			t.Errorf("%s from %s: %d %v, want %d", c.ep, c.local, got, ok, c.want)
		}
	}
	if _, ok := pathSegment(netip.MustParseAddrPort("10.9.9.9:9"), netip.AddrPort{}); ok {
		t.Error("a destination without a route has a path MTU")
	}
}
