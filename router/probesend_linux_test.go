//go:build linux

package router

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/netnstest"
	"github.com/bridgehead/bridgehead/transit"
	"github.com/bridgehead/bridgehead/udp"
)

// TestProbesPastRefusedDestination: in a namespace of its own, one of
// site B's three gateways sits behind a prohibit route, so the kernel
// refuses every datagram to it (EACCES). A probe round of a real
// sendmmsg socket must still probe the other two, count the refusal
// once, for that gateway only (bridgehead_peer_probes_total{result=
// "send_failed"}, drop reason send_error), and note the send to the
// others (a refused batch used to count every probe in it as failed).
func TestProbesPastRefusedDestination(t *testing.T) {
	netnstest.Enter(t, []string{"route", "add", "prohibit", "198.51.100.1/32"})
	clock := newFakeClock()
	now := clock.Now()
	bind, err := udp.Listen(netip.MustParseAddrPort("0.0.0.0:0"), udp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer bind.Close()
	idA := newIdentity(t, bhcrypto.AESGCM)
	a, err := New(Options{TUN: &nullTUN{batch: 64}, Bind: bind, Identity: idA, Clock: clock})
	if err != nil {
		t.Fatal(err)
	}
	// The refused gateway first: before the fix a refusal ended the
	// batch's accounting for those after it.
	refused := netip.MustParseAddrPort("198.51.100.1:51820")
	var sinks []*udp.LinuxBind
	eps := []netip.AddrPort{refused}
	for range 2 {
		s, err := udp.Listen(netip.MustParseAddrPort("127.0.0.1:0"), udp.Options{})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		sinks = append(sinks, s)
		eps = append(eps, s.LocalAddr())
	}
	var ids []*bhcrypto.Identity
	site := SiteConfig{Name: "site-b", Prefixes: siteBPrefixes}
	for i, ep := range eps {
		id := newIdentity(t, bhcrypto.AESGCM)
		ids = append(ids, id)
		site.Gateways = append(site.Gateways, PeerConfig{Name: []string{"gw-b0", "gw-b1", "gw-b2"}[i], PublicKey: id.Public, Endpoint: ep})
	}
	if err := a.SetConfig(&Config{LocalSite: "site-a", Sites: []SiteConfig{{Name: "site-a", Prefixes: siteAPrefixes}, site}}); err != nil {
		t.Fatal(err)
	}
	st := a.state.Load()
	for i, id := range ids {
		p := st.peers[id.Public]
		kp := sessionWith(t, idA, id, uint32(10+i), now)
		p.current.Store(kp)
		a.index.add(p, kp)
		p.live.acked.Store(a.mono.ns(now))
	}

	// A new session is probed at once (to learn its lane flags).
	a.probe.run(st, now)

	for i, s := range sinks {
		if n := receiveCount(t, s); n != 1 {
			t.Errorf("gw-b%d got %d probes, want 1", i+1, n)
		}
	}
	if got := bind.SendFailures(udp.SendProhibited); got != 1 {
		t.Errorf("socket counts %d datagrams refused as prohibited, want 1", got)
	}
	if got := a.drops.Get(Inside, ReasonSendError); got != 1 {
		t.Errorf("%d control messages counted as not sent, want 1 (the refused gateway's)", got)
	}
	for i, p := range st.order {
		s := p.Stats()
		wantFails, wantSent := uint64(0), true
		if i == 0 {
			wantFails, wantSent = 1, false
		}
		if s.Live.ProbesSent != 1 || s.Live.ProbeSendFailures != wantFails {
			t.Errorf("%s: %d probes sent, %d refused; want 1 and %d", p.name, s.Live.ProbesSent, s.Live.ProbeSendFailures, wantFails)
		}
		if sent := p.lastSend.Load() != 0; sent != wantSent {
			t.Errorf("%s: send noted %v, want %v", p.name, sent, wantSent)
		}
	}
	// A bind that cannot say which datagrams were refused (transit's,
	// which wraps this one): the others still go out, the batch counts
	// as not sent, and no gateway is blamed for the refusal.
	a.bind = manyOnly{bind}
	for _, p := range st.order {
		if !a.probe.queue(&a.probe.probes, p, p.current.Load(), control{typ: probeRequest, echo: 1, size: probeLen}) {
			t.Fatal("probe not sealed")
		}
	}
	a.probe.send(&a.probe.probes)
	for i, s := range sinks {
		if n := receiveCount(t, s); n != 1 {
			t.Errorf("through SendMany: gw-b%d got %d probes, want 1", i+1, n)
		}
	}
	if got := a.drops.Get(Inside, ReasonSendError); got != 1+3 {
		t.Errorf("through SendMany: %d control messages counted as not sent in all, want 4", got)
	}
	for i, p := range st.order {
		want := uint64(0)
		if i == 0 {
			want = 1 // from the first round
		}
		if got := p.live.probeSendFails.Load(); got != want {
			t.Errorf("through SendMany: %s blamed for %d refused probes, want %d", p.name, got, want)
		}
	}

	// transit.Bind, the daemon's bind around this socket: it passes
	// SendManyEach through and says which datagram was refused, so the
	// refused gateway, and only it, is blamed again.
	relay, err := transit.New(nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	a.bind = transit.NewBind(bind, a, relay, 1420)
	for _, p := range st.order {
		if !a.probe.queue(&a.probe.probes, p, p.current.Load(), control{typ: probeRequest, echo: 2, size: probeLen}) {
			t.Fatal("probe not sealed")
		}
	}
	a.probe.send(&a.probe.probes)
	for i, s := range sinks {
		if n := receiveCount(t, s); n != 1 {
			t.Errorf("through transit.Bind: gw-b%d got %d probes, want 1", i+1, n)
		}
	}
	if got := a.drops.Get(Inside, ReasonSendError); got != 1+3+1 {
		t.Errorf("through transit.Bind: %d control messages counted as not sent in all, want 5", got)
	}
	for i, p := range st.order {
		want := uint64(0)
		if i == 0 {
			want = 2 // the first round's and this one's
		}
		if got := p.live.probeSendFails.Load(); got != want {
			t.Errorf("through transit.Bind: %s blamed for %d refused probes, want %d", p.name, got, want)
		}
	}

	scr := scrape(t, a)
	for _, series := range []string{
		`bridgehead_peer_probes_total{gateway="gw-b0",result="send_failed",site="site-b"} 2`,
		`bridgehead_peer_probes_total{gateway="gw-b1",result="send_failed",site="site-b"} 0`,
	} {
		if !strings.Contains(scr, series+"\n") {
			t.Errorf("scrape lacks %s", series)
		}
	}
}

// sessionWith is the keypair the initiator a holds after a handshake
// with b, with local index idx.
func sessionWith(t *testing.T, a, b *bhcrypto.Identity, idx uint32, now time.Time) *bhcrypto.Keypair {
	t.Helper()
	in, msg, err := a.CreateInitiation(b.Public, idx, now)
	if err != nil {
		t.Fatal(err)
	}
	ri, err := b.ConsumeInitiation(msg)
	if err != nil {
		t.Fatal(err)
	}
	_, resp, err := b.CreateResponse(ri, idx+100, now)
	if err != nil {
		t.Fatal(err)
	}
	kp, err := in.ConsumeResponse(resp, now)
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

// receiveCount reads what s received within 200 ms and returns how many
// datagrams.
func receiveCount(t *testing.T, s *udp.LinuxBind) int {
	t.Helper()
	n := 0
	bufs, sizes, eps := [][]byte{make([]byte, 2048)}, []int{0}, []netip.AddrPort{{}}
	for {
		ok, err := s.WaitReadable(200*time.Millisecond, false)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return n
		}
		k, err := s.Receive(bufs, sizes, eps)
		if err != nil {
			t.Fatal(err)
		}
		n += k
	}
}

// manyOnly is a bind with SendMany but not SendManyEach.
type manyOnly struct{ *udp.LinuxBind }

func (m manyOnly) SendManyEach() {} // hides LinuxBind's
