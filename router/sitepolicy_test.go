package router

import (
	"maps"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Pod and node CIDRs of the policy tests: the hot pair's plan (site-a,
// site-b) and a third site without gateways.
var (
	podsA = []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}
	podsB = []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("fd00:245::/56")}
	nodeA = netip.MustParseAddr("10.224.0.5")
	nodeB = netip.MustParseAddr("192.168.50.5")
)

// policyConfig is twoSiteConfig with pod CIDRs, a site-c, and the
// allow-lists of site-a and site-b (nil: every site).
func policyConfig(local string, h *hotPair, listA, listB []string) *Config {
	c := twoSiteConfig(local, onlyPeer(h.b), onlyPeer(h.a), h.bindA.local, h.bindB.local)
	c.Sites[0].PodPrefixes, c.Sites[0].AllowedSources = podsA, listA
	c.Sites[1].PodPrefixes, c.Sites[1].AllowedSources = podsB, listB
	c.Sites = append(c.Sites, SiteConfig{Name: "site-c",
		Prefixes:    []netip.Prefix{netip.MustParsePrefix("10.226.0.0/16"), netip.MustParsePrefix("10.246.0.0/16")},
		PodPrefixes: []netip.Prefix{netip.MustParsePrefix("10.246.0.0/16")}})
	return c
}

// onlyPeer is the public key of r's one remote gateway.
func onlyPeer(r *Router) bhcrypto.PublicKey {
	for k := range r.state.Load().peers {
		return k
	}
	return bhcrypto.PublicKey{}
}

func setPolicy(t testing.TB, h *hotPair, listA, listB []string, onA, onB bool) {
	t.Helper()
	if onA {
		if err := h.a.SetConfig(policyConfig("site-a", h, listA, listB)); err != nil {
			t.Fatal(err)
		}
	}
	if onB {
		if err := h.b.SetConfig(policyConfig("site-b", h, listA, listB)); err != nil {
			t.Fatal(err)
		}
	}
}

// send routes one packet from src to dst through A and hands whatever A
// sent to B; it reports whether A sent it and whether B delivered it.
func (h *hotPair) send(t testing.TB, in *insideBatch, out *outsideBatch, src, dst netip.Addr) (sent, delivered bool) {
	t.Helper()
	return h.sendPacket(in, out, udpPacket(t, src, dst, []byte("policy")))
}

// sendPacket is send of a packet made beforehand.
func (h *hotPair) sendPacket(in *insideBatch, out *outsideBatch, pkt []byte) (sent, delivered bool) {
	s0, w0 := h.bindA.sent, h.tunB.written
	h.a.routeBatch(refill(in, pkt), 1, h.now)
	if h.bindA.sent == s0 {
		return false, false
	}
	out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
	out.eps[0] = h.bindA.local
	h.b.receiveBatch(out, 1, h.now)
	return true, h.tunB.written > w0
}

func policyRow(r *Router, site string) SitePolicyDrops {
	for _, d := range r.SitePolicyDrops() {
		if d.Site == site {
			return d
		}
	}
	return SitePolicyDrops{}
}

// TestSitePolicyInside: the sending gateway drops its own pods' packets
// to a site whose list leaves its site out, before sealing, and counts
// them; node sources and sites that admit it pass.
func TestSitePolicyInside(t *testing.T) {
	cases := []struct {
		name  string
		listB []string
		pod   bool // podA → podB refused
	}{
		{"absent admits every site", nil, false},
		{"empty admits no remote site", []string{}, true},
		{"lists site-a", []string{"site-a"}, false},
		{"lists site-c only", []string{"site-c"}, true},
		{"lists itself only", []string{"site-b"}, true},
		{"lists site-c and site-a", []string{"site-c", "site-a"}, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			h := newHotPair(t, bhcrypto.AESGCM)
			setPolicy(t, h, nil, c.listB, true, true)
			in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
			for _, p := range []struct {
				src, dst netip.Addr
				refused  bool
			}{
				{podA, podB, c.pod},
				{podA6, podB6, c.pod},
				{podA, nodeB, c.pod}, // a pod to a node: the source decides
				{nodeA, podB, false}, // nodes are never restricted
				{nodeA, nodeB, false},
			} {
				sent, delivered := h.send(t, in, out, p.src, p.dst)
				if sent == p.refused || delivered == p.refused {
					t.Errorf("%s → %s: sent %v, delivered %v; want refused %v", p.src, p.dst, sent, delivered, p.refused)
				}
			}
			want := uint64(0)
			if c.pod {
				want = 3
			}
			if got := h.a.drops.Get(Inside, ReasonSitePolicy); got != want {
				t.Errorf("A's site_policy drops inside = %d, want %d", got, want)
			}
			if row := policyRow(h.a, "site-b"); row.Inside != want || row.RefusesLocal != c.pod {
				t.Errorf("A's row for site-b = %+v, want %d inside, refusesLocal %v", row, want, c.pod)
			}
			if got := h.b.drops.Get(Outside, ReasonSitePolicy); got != 0 {
				t.Errorf("B dropped %d: the sender should have", got)
			}
		})
	}
}

// TestSitePolicyOutside: a sender that does not apply the receiver's
// list (an older config, or one that ignores it) gets nothing through:
// the receiving gateway drops the refused site's pod packets after
// opening them, before delivery.
func TestSitePolicyOutside(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	setPolicy(t, h, nil, nil, true, false)                // A: no lists
	setPolicy(t, h, nil, []string{"site-c"}, false, true) // B: admits site-c only
	in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
	for _, p := range []struct {
		src, dst netip.Addr
		refused  bool
	}{
		{podA, podB, true},
		{podA6, podB6, true},
		{nodeA, podB, false},
		{nodeA, nodeB, false},
	} {
		sent, delivered := h.send(t, in, out, p.src, p.dst)
		if !sent || delivered == p.refused {
			t.Errorf("%s → %s: sent %v, delivered %v; want sent and refused %v", p.src, p.dst, sent, delivered, p.refused)
		}
	}
	if got := h.b.drops.Get(Outside, ReasonSitePolicy); got != 2 {
		t.Errorf("B's site_policy drops outside = %d, want 2", got)
	}
	if row := policyRow(h.b, "site-a"); row.Outside != 2 || !row.Refused {
		t.Errorf("B's row for site-a = %+v, want 2 outside, refused", row)
	}
	if got := h.a.drops.Get(Inside, ReasonSitePolicy); got != 0 {
		t.Errorf("A dropped %d with no list in its config", got)
	}
}

// TestSitePolicyReload: tightening and loosening the list while allowed
// traffic flows. Every allowed packet is delivered across every reload
// (the sessions survive: no handshake, no queue), refused ones stop at
// the first packet after the tightening reload, and the counters carry
// across reloads.
func TestSitePolicyReload(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	setPolicy(t, h, nil, nil, true, true)
	kpA := h.a.state.Load().peers[onlyPeer(h.a)].current.Load()

	// Allowed traffic (node A → pod B) flows on its own batches while
	// the main goroutine reloads both gateways 50 times.
	in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
	allowed := udpPacket(t, nodeA, podB, []byte("allowed"))
	var wg sync.WaitGroup
	stop := make(chan struct{})
	var allowedSent, allowedLost atomic.Int64
	var mu sync.Mutex // the pair's binds and TUN are not shared otherwise
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			mu.Lock()
			sent, delivered := h.sendPacket(in, out, allowed)
			mu.Unlock()
			if !sent || !delivered {
				allowedLost.Add(1)
			}
			allowedSent.Add(1)
		}
	}()
	pin, pout := h.a.newInsideBatch(), h.b.newOutsideBatch()
	refused := 0
	for i := range 50 {
		tight := i%2 == 0
		var listB []string // loose: every site
		if tight {
			listB = []string{"site-c"}
		}
		setPolicy(t, h, nil, listB, true, true)
		mu.Lock()
		_, delivered := h.send(t, pin, pout, podA, podB)
		mu.Unlock()
		if delivered == tight {
			t.Fatalf("reload %d (tight %v): pod A → pod B delivered %v", i, tight, delivered)
		}
		if tight {
			refused++
		}
		// Let the allowed flow send between every two reloads.
		for n := allowedSent.Load(); allowedSent.Load() < n+2; {
			runtime.Gosched()
		}
	}
	close(stop)
	wg.Wait()
	if allowedSent.Load() < 100 || allowedLost.Load() != 0 {
		t.Fatalf("allowed traffic: %d of %d packets lost across the reloads", allowedLost.Load(), allowedSent.Load())
	}
	if got := policyRow(h.a, "site-b").Inside; got != uint64(refused) {
		t.Errorf("A's counter for site-b = %d after the reloads, want %d (carried across them)", got, refused)
	}
	if kp := h.a.state.Load().peers[onlyPeer(h.a)].current.Load(); kp != kpA {
		t.Errorf("the session changed across reloads")
	}
	t.Logf("%d allowed packets delivered across 50 reloads; %d refused", allowedSent.Load(), refused)
}

// TestSitePolicyConfigErrors: a list naming no site is refused whole and
// leaves the running state in place.
func TestSitePolicyConfigErrors(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	setPolicy(t, h, nil, []string{"site-a"}, true, true)
	before := h.a.state.Load()
	err := h.a.SetConfig(policyConfig("site-a", h, nil, []string{"site-d"}))
	if err == nil || !strings.Contains(err.Error(), `"site-d"`) || !strings.Contains(err.Error(), "site-b") {
		t.Fatalf("SetConfig with an unknown site: %v", err)
	}
	if h.a.state.Load() != before {
		t.Fatal("a refused config replaced the state")
	}
}

// TestSitePolicyAllocs: the checks allocate nothing, whether they pass
// or drop, on either path.
func TestSitePolicyAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("allocation counts need a quiet run")
	}
	h := newHotPair(t, bhcrypto.AESGCM)
	in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
	allowed := udpPacket(t, nodeA, podB, make([]byte, 1000))
	refused := udpPacket(t, podA, podB, make([]byte, 1000))
	// A list that refuses site-a on B only: A sends, B drops after
	// opening; with it on A too, A drops before sealing.
	setPolicy(t, h, nil, nil, true, false)
	setPolicy(t, h, nil, []string{"site-c"}, false, true)
	through := func(pkt []byte) func() {
		return func() {
			h.a.routeBatch(refill(in, pkt), 1, h.now)
			out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
			out.eps[0] = h.bindA.local
			h.b.receiveBatch(out, 1, h.now)
		}
	}
	if n := testing.AllocsPerRun(1000, through(allowed)); n != 0 {
		t.Errorf("allowed through a list: %.1f allocations per packet", n)
	}
	if n := testing.AllocsPerRun(1000, through(refused)); n != 0 {
		t.Errorf("refused outside: %.1f allocations per packet", n)
	}
	if got := h.b.drops.Get(Outside, ReasonSitePolicy); got < 1000 {
		t.Fatalf("B dropped %d refused packets, want 1000+", got)
	}
	setPolicy(t, h, nil, []string{"site-c"}, true, false)
	if n := testing.AllocsPerRun(1000, func() { h.a.routeBatch(refill(in, refused), 1, h.now) }); n != 0 {
		t.Errorf("refused inside: %.1f allocations per packet", n)
	}
	if got := h.a.drops.Get(Inside, ReasonSitePolicy); got < 1000 {
		t.Fatalf("A dropped %d refused packets, want 1000+", got)
	}
}

// BenchmarkSitePolicy: the inside and outside paths of an allowed
// packet, without a list and through one (node A → pod B passes site-b's
// list of site-c).
func BenchmarkSitePolicy(b *testing.B) {
	for _, c := range []struct {
		name string
		list []string
	}{{"no-list", nil}, {"list", []string{"site-c"}}} {
		b.Run(c.name, func(b *testing.B) {
			h := newHotPair(b, bhcrypto.AESGCM)
			h.bindA.discard = false
			setPolicy(b, h, nil, c.list, true, true)
			in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
			pkt := udpPacket(b, nodeA, podB, make([]byte, 1000))
			b.ReportAllocs()
			for b.Loop() {
				h.a.routeBatch(refill(in, pkt), 1, h.now)
				out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
				out.eps[0] = h.bindA.local
				h.b.receiveBatch(out, 1, h.now)
			}
		})
	}
}

// TestSitePolicyMetrics: a series for each direction where a list
// applies, with its count, and none where none does.
func TestSitePolicyMetrics(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	setPolicy(t, h, nil, []string{"site-c"}, true, true) // site-b admits site-c only
	in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
	h.send(t, in, out, podA, podB)
	h.send(t, in, out, podA, podB)
	for _, c := range []struct {
		r    *Router
		want map[string]float64
	}{
		// A: site-b refuses its pods (inside); A admits everyone.
		{h.a, map[string]float64{"inside/site-b": 2}},
		// B: it refuses site-a's pods (outside; A never sent them).
		{h.b, map[string]float64{"outside/site-a": 0}},
	} {
		reg := prometheus.NewPedanticRegistry()
		reg.MustRegister(NewSitePolicyCollector(c.r))
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]float64{}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				l := map[string]string{}
				for _, lp := range m.GetLabel() {
					l[lp.GetName()] = lp.GetValue()
				}
				got[l["direction"]+"/"+l["site"]] = m.GetCounter().GetValue()
			}
		}
		if !maps.Equal(got, c.want) {
			t.Errorf("series %v, want %v", got, c.want)
		}
	}
}

// FuzzSitePolicy feeds arbitrary packets through both paths of a pair
// whose lists refuse site-a's pods: B's list on B only (A sends, B
// checks after opening), and A's copy of it (A checks before sealing).
// Nothing may panic, and no packet whose source is a site-a pod may
// reach B's TUN, whatever else the packet holds.
func FuzzSitePolicy(f *testing.F) {
	h := newHotPair(f, bhcrypto.AESGCM)
	setPolicy(f, h, nil, nil, true, false)
	setPolicy(f, h, nil, []string{"site-c"}, false, true)
	f.Add(udpPacket(f, podA, podB, []byte("v4")), false)
	f.Add(udpPacket(f, podA6, podB6, []byte("v6")), true)
	f.Add(udpPacket(f, nodeA, podB, []byte("node")), false)
	f.Add([]byte{0x45}, false)
	in, out := h.a.newInsideBatch(), h.b.newOutsideBatch()
	pods := []netip.Prefix{podsA[0], podsA[1]}
	f.Fuzz(func(t *testing.T, pkt []byte, senderKnows bool) {
		if len(pkt) > h.a.set.mtu {
			return
		}
		var listOnA []string
		if senderKnows {
			listOnA = []string{"site-c"}
		}
		setPolicy(t, h, nil, listOnA, true, false)
		src, isIP := innerSource(pkt)
		sent, delivered := h.sendPacket(in, out, pkt)
		fromPod := isIP && (pods[0].Contains(src) || pods[1].Contains(src))
		if fromPod && delivered {
			t.Fatalf("a packet from site-a's pod %s reached B (sent %v)", src, sent)
		}
		if fromPod && senderKnows && sent {
			t.Fatalf("A sealed a packet from its pod %s for a site that refuses it", src)
		}
	})
}

// BenchmarkSitePolicyChecks is the two checks alone, as a packet a list
// concerns pays them: the sender's (source in its pod CIDRs?) and the
// receiver's (source in the refused site's pod CIDRs?), for a node
// source (allowed) and a pod source (refused).
func BenchmarkSitePolicyChecks(b *testing.B) {
	h := newHotPair(b, bhcrypto.AESGCM)
	setPolicy(b, h, nil, []string{"site-c"}, true, true)
	stA, stB := h.a.state.Load(), h.b.state.Load()
	toB, fromA := stA.sites["site-b"], stB.sites["site-a"]
	for _, c := range []struct {
		name string
		src  netip.Addr
	}{{"node-source", nodeA}, {"pod-source", podA}} {
		pkt := udpPacket(b, c.src, podB, make([]byte, 1000))
		b.Run(c.name, func(b *testing.B) {
			n := 0
			for b.Loop() {
				if stA.sendRefused(toB, pkt) {
					n++
				}
				if stB.receiveRefused(fromA, c.src) {
					n++
				}
			}
			if (n > 0) != (c.src == podA) {
				b.Fatalf("%d refusals for %s", n, c.src)
			}
		})
	}
}
