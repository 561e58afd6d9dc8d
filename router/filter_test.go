package router

import (
	"errors"
	"maps"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/earlydrop"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// recordingFilter is a KernelFilter that remembers what it was told.
type recordingFilter struct {
	mu         sync.Mutex
	r          *Router // to check ordering against the index table
	indices    map[uint32]bool
	endpoints  []netip.AddrPort
	counts     [5]uint64
	blocked    map[netip.Addr]time.Duration
	failAdd    error
	failAdds   int // with failAdd: only this many AddIndex calls fail (0: all)
	failDetach int // Detach fails this many times first
	detaches   int
	detached   bool
	early      int // AddIndex calls made before the index was published
	late       int // ... made after
}

func newRecordingFilter() *recordingFilter {
	return &recordingFilter{indices: map[uint32]bool{}}
}

func (f *recordingFilter) AddIndex(idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.failAdd != nil {
		err := f.failAdd
		if f.failAdds > 0 {
			if f.failAdds--; f.failAdds == 0 {
				f.failAdd = nil
			}
		}
		return err
	}
	if f.r != nil && f.r.index.has(idx) {
		f.late++
	} else {
		f.early++
	}
	f.indices[idx] = true
	return nil
}

func (f *recordingFilter) RemoveIndex(idx uint32) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.indices, idx)
	return nil
}

func (f *recordingFilter) SetEndpoints(eps []netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.endpoints = slices.Clone(eps)
	return nil
}

func (f *recordingFilter) Block(a netip.Addr, d time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.blocked == nil {
		f.blocked = map[netip.Addr]time.Duration{}
	}
	f.blocked[a] += d
	return nil
}

func (f *recordingFilter) Counts() ([5]uint64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts, nil
}

func (f *recordingFilter) Detach() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.detaches++
	if f.detaches <= f.failDetach {
		return errors.New("detach refused")
	}
	f.detached = true
	return nil
}

func (f *recordingFilter) snapshot() (map[uint32]bool, []netip.AddrPort, int, int, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[uint32]bool{}
	for k := range f.indices {
		m[k] = true
	}
	return m, slices.Clone(f.endpoints), f.early, f.late, f.detached
}

// newFilteredPair is newLoopbackPair with kernel filters made by mk (nil:
// no filter) for A and B.
func newFilteredPair(t *testing.T, mkA, mkB func(*udp.LinuxBind) KernelFilter) (a, b *gateway) {
	t.Helper()
	a = &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-a", 1420)}
	b = &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-b", 1420)}
	for _, g := range []struct {
		gw *gateway
		mk func(*udp.LinuxBind) KernelFilter
	}{{a, mkA}, {b, mkB}} {
		bind, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		g.gw.bind = bind
		if g.mk != nil {
			g.gw.filter = g.mk(bind)
		}
	}
	cfgA := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	a.start(t, cfgA)
	b.start(t, cfgB)
	return a, b
}

func use(f KernelFilter) func(*udp.LinuxBind) KernelFilter {
	return func(*udp.LinuxBind) KernelFilter { return f }
}

// TestKernelFilterSync: the router tells the filter every receiver index
// before the index can be used, forgets retired ones, gives it the
// configured endpoints, and adds its counts to Drops.
func TestKernelFilterSync(t *testing.T) {
	fa, fb := newRecordingFilter(), newRecordingFilter()
	a, b := newFilteredPair(t, use(fa), use(fb))
	pkt := udpPacket(t, podA, podB, []byte("through the filter"))
	if err := a.tun.Inject(pkt); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	if err := b.tun.Inject(udpPacket(t, podB, podA, []byte("back"))); err != nil {
		t.Fatal(err)
	}
	a.expectPacket(t)
	for _, g := range []struct {
		name  string
		gw    *gateway
		f     *recordingFilter
		other *gateway
	}{{"A", a, fa, b}, {"B", b, fb, a}} {
		idx, eps, early, late, detached := g.f.snapshot()
		want := g.gw.r.index.indices()
		if len(want) == 0 || !mapsEqual(idx, want) {
			t.Errorf("%s: filter indices %v, index table %v", g.name, idx, want)
		}
		if late != 0 || early == 0 {
			t.Errorf("%s: %d indices reached the filter before the table, %d after", g.name, early, late)
		}
		// Only remote peers: the local gateway's endpoint is not one.
		wantEps := []netip.AddrPort{g.other.bind.LocalAddr()}
		if !slices.Equal(eps, wantEps) {
			t.Errorf("%s: filter endpoints %v, want %v", g.name, eps, wantEps)
		}
		if detached || !g.gw.r.FilterAttached() {
			t.Errorf("%s: filter detached", g.name)
		}
	}
	// Retiring a session removes its index from the filter.
	p := b.r.state.Load().order[0]
	kp := p.current.Load()
	b.r.retire(p.current.Swap(nil))
	if idx, _, _, _, _ := fb.snapshot(); idx[kp.LocalIndex] {
		t.Error("retired index still in the filter")
	}
	// Kernel drops show up in Drops by reason.
	fb.mu.Lock()
	fb.counts = [5]uint64{1, 2, 3, 4, 5}
	fb.mu.Unlock()
	waitDrop(t, b.r, Outside, ReasonRunt, 1)
	waitDrop(t, b.r, Outside, ReasonUnknownType, 2)
	waitDrop(t, b.r, Outside, ReasonBadSize, 3)
	waitDrop(t, b.r, Outside, ReasonUnknownIndex, 4)
	waitDrop(t, b.r, Outside, ReasonRateLimited, 5)
}

// TestBadMACSourceBlocked: a source sending initiations with a bad mac1
// faster than BadMACRate is blocked in the kernel filter, once, for
// BlockBadMACFor; one that stays below the burst is not.
func TestBadMACSourceBlocked(t *testing.T) {
	clock := newFakeClock()
	fb := newRecordingFilter()
	a := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-a", 1420), clock: clock}
	b := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-b", 1420), clock: clock, filter: fb}
	a.bind, b.bind = udp.NewPair(netip.MustParseAddrPort("192.0.2.1:51820"), netip.MustParseAddrPort("192.0.2.2:51820"))
	b.start(t, twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr()))
	bad := make([]byte, bhcrypto.InitiationSize)
	bad[0] = bhcrypto.MsgInitiation
	flooder := netip.MustParseAddrPort("198.51.100.2:4000")
	quiet := netip.MustParseAddrPort("198.51.100.3:4000")
	out := b.r.newOutsideBatch()
	send := func(from netip.AddrPort, n int) {
		for range n {
			copy(out.bufs[0], bad)
			out.sizes[0] = len(bad)
			out.eps[0] = from
			b.r.receiveBatch(out, 1, clock.Now())
		}
	}
	send(quiet, BadMACBurst)
	send(flooder, BadMACBurst+50)
	// A peer's address is never blocked, whatever the port: a spoofed
	// flood must not be able to cut a peer's handshakes off.
	send(netip.AddrPortFrom(a.bind.LocalAddr().Addr(), 9999), BadMACBurst+50)
	fb.mu.Lock()
	got := maps.Clone(fb.blocked)
	fb.mu.Unlock()
	if len(got) != 1 || got[flooder.Addr()] != BlockBadMACFor {
		t.Errorf("blocked %v, want only %s for %s (once)", got, flooder.Addr(), BlockBadMACFor)
	}
	if n := b.r.drops.Get(Outside, ReasonBadMAC); n != 3*BadMACBurst+100 {
		t.Errorf("bad_mac drops %d, want %d", n, 3*BadMACBurst+100)
	}
	// Many distinct sources, each below the rate, fill the limiter's
	// table: none of them is over its rate, so none is blocked.
	for i := range 5000 {
		send(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 9, byte(i >> 8), byte(i)}), 4000), 1)
	}
	fb.mu.Lock()
	if len(fb.blocked) != 1 {
		t.Errorf("%d sources blocked after a spoofed-source flood, want still 1", len(fb.blocked))
	}
	fb.mu.Unlock()
	// After the block expires, a source still flooding is blocked again.
	clock.Advance(BlockBadMACFor + limiterGCInterval)
	send(flooder, BadMACBurst+1)
	fb.mu.Lock()
	again := fb.blocked[flooder.Addr()]
	fb.mu.Unlock()
	if again != 2*BlockBadMACFor {
		t.Errorf("after expiry: blocked for %s in total, want %s", again, 2*BlockBadMACFor)
	}
}

func mapsEqual(a, b map[uint32]bool) bool {
	if len(a) != len(b) {
		return false
	}
	for k := range a {
		if !b[k] {
			return false
		}
	}
	return true
}

// TestKernelFilterDetachOnError: a filter that cannot learn an index is
// detached, and traffic flows without it.
func TestKernelFilterDetachOnError(t *testing.T) {
	fb := newRecordingFilter()
	fb.failAdd = errors.New("map full")
	a, b := newFilteredPair(t, nil, use(fb))
	pkt := udpPacket(t, podA, podB, []byte("after detach"))
	if err := a.tun.Inject(pkt); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	if _, _, _, _, detached := fb.snapshot(); !detached {
		t.Error("filter not detached after a failed AddIndex")
	}
	if b.r.FilterAttached() {
		t.Error("router still reports the filter attached")
	}
}

// TestKernelFilterDetachRetried: when the kernel refuses the detach, the
// router keeps the filter and retries until it is gone.
func TestKernelFilterDetachRetried(t *testing.T) {
	fb := newRecordingFilter()
	fb.failAdd = errors.New("map full")
	fb.failDetach = 2
	a, b := newFilteredPair(t, nil, use(fb))
	if err := a.tun.Inject(udpPacket(t, podA, podB, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	waitFor(t, "the filter detached after retries", func() bool { return !b.r.FilterAttached() })
	fb.mu.Lock()
	defer fb.mu.Unlock()
	if !fb.detached || fb.detaches != 3 {
		t.Errorf("detach calls %d (detached %v), want 3 with the last one succeeding", fb.detaches, fb.detached)
	}
}

// TestKernelFilterIndexRetried: when adding an index fails and the kernel
// refuses the detach too, the filter stays on the socket; the router then
// retries the index that failed, so the new session's packets are not
// dropped in the kernel as unknown_index while the detach is retried.
func TestKernelFilterIndexRetried(t *testing.T) {
	fb := newRecordingFilter()
	fb.failAdd = errors.New("map busy")
	fb.failAdds = 1
	fb.failDetach = 1 << 30
	a, b := newFilteredPair(t, nil, use(fb))
	if err := a.tun.Inject(udpPacket(t, podA, podB, []byte("x"))); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	if !b.r.FilterAttached() {
		t.Fatal("filter dropped although it could not be detached")
	}
	waitFor(t, "the failed index added on retry", func() bool {
		want := b.r.index.indices()
		got, _, _, _, _ := fb.snapshot()
		return len(want) > 0 && mapsEqual(want, got)
	})
}

// TestKernelFilterReal runs the pair with real earlydrop filters (root):
// traffic flows both ways, and garbage aimed at B is dropped in the kernel
// and counted in B's Drops.
func TestKernelFilterReal(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("loading eBPF needs root")
	}
	a, b := newFilteredPair(t, attachReal(t), attachReal(t))
	for i := range 3 {
		if err := a.tun.Inject(udpPacket(t, podA, podB, []byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
		b.expectPacket(t)
		if err := b.tun.Inject(udpPacket(t, podB, podA, []byte{byte(i)})); err != nil {
			t.Fatal(err)
		}
		a.expectPacket(t)
	}
	if !a.r.FilterAttached() || !b.r.FilterAttached() {
		t.Fatal("a filter was detached")
	}
	garbage := make([]byte, 100)
	garbage[0] = bhcrypto.MsgTransport
	garbage[4] = 0x77 // an index B does not have
	for range 10 {
		sendRaw(t, b.bind.LocalAddr(), garbage)
	}
	sendRaw(t, b.bind.LocalAddr(), []byte{9, 9})
	waitDrop(t, b.r, Outside, ReasonUnknownIndex, 10)
	waitDrop(t, b.r, Outside, ReasonRunt, 1)
	// Still working afterwards.
	if err := a.tun.Inject(udpPacket(t, podA, podB, []byte("after"))); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
}

// attachReal attaches an earlydrop filter to the bind.
func attachReal(t *testing.T) func(*udp.LinuxBind) KernelFilter {
	return func(b *udp.LinuxBind) KernelFilter {
		f, err := earlydrop.Attach(b)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		return f
	}
}
