package router

import (
	"net"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/tun"
)

// silentPeer is a UDP socket standing in for a gateway that never answers.
type silentPeer struct {
	c *net.UDPConn
}

func newSilentPeer(t *testing.T) *silentPeer {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &silentPeer{c: c}
}

func (s *silentPeer) addr() netip.AddrPort { return s.c.LocalAddr().(*net.UDPAddr).AddrPort() }

// next returns the next datagram, failing the test after a timeout.
func (s *silentPeer) next(t *testing.T) []byte {
	t.Helper()
	buf := make([]byte, 2048)
	s.c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := s.c.Read(buf)
	if err != nil {
		t.Fatalf("no datagram: %v", err)
	}
	return buf[:n]
}

// TestHandshakeRetransmitAndGiveUp: with a peer that never answers, the
// initiation is retransmitted every RekeyTimeout (+ jitter) and after
// RekeyAttemptTime the queued packets are dropped and counted.
func TestHandshakeRetransmitAndGiveUp(t *testing.T) {
	clock := newFakeClock()
	peer := newSilentPeer(t)
	idB := newIdentity(t, bhcrypto.AESGCM)
	a := &gateway{id: newIdentity(t, bhcrypto.AESGCM), tun: tun.NewChannel("bh-a", 1420), clock: clock}
	bind := listenLoopback(t)
	a.bind = bind
	a.start(t, twoSiteConfig("site-a", a.id.Public, idB.Public, bind.LocalAddr(), peer.addr()))

	for i := range 3 {
		a.tun.Inject(udpPacket(t, podA, podB, []byte{byte(i)}))
	}
	first := peer.next(t)
	if first[0] != bhcrypto.MsgInitiation || len(first) != bhcrypto.InitiationSize {
		t.Fatalf("first datagram is not an initiation: % x", first[:8])
	}
	if ri, err := idB.ConsumeInitiation(first); err != nil || ri.PeerStatic != a.id.Public {
		t.Fatalf("initiation does not verify for B: %v", err)
	}
	// Before RekeyTimeout nothing is resent.
	clock.Advance(RekeyTimeout - time.Second)
	peer.c.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
	if n, err := peer.c.Read(make([]byte, 2048)); err == nil {
		t.Fatalf("retransmitted too early (%d bytes)", n)
	}
	// After RekeyTimeout + max jitter, a new initiation (new ephemeral key).
	clock.Advance(time.Second + RekeyJitter)
	second := peer.next(t)
	if string(second[8:40]) == string(first[8:40]) {
		t.Fatal("retransmission reused the ephemeral key")
	}
	// Keep failing until RekeyAttemptTime: queued packets are dropped.
	for range int(RekeyAttemptTime / RekeyTimeout) {
		clock.Advance(RekeyTimeout + RekeyJitter)
	}
	waitDrop(t, a.r, Inside, ReasonHandshakeTimeout, 3)
	if h := a.r.Handshakes(); h.TimedOut != 1 || h.Initiated < uint64(RekeyAttemptTime/(RekeyTimeout+RekeyJitter)) {
		t.Fatalf("handshake stats %+v", h)
	}
	if q := a.r.Peers()[0].QueuedPackets; q != 0 {
		t.Fatalf("%d packets still queued", q)
	}
}

// TestInitiationChecks: the responder drops initiations that are replayed,
// come from unknown keys or carry a bad MAC, each with its own reason, and
// answers a fresh one.
func TestInitiationChecks(t *testing.T) {
	// A fake clock that never ticks: no proactive handshake of A's own
	// is answered next to the ones the test sends.
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, newFakeClock())
	stranger := newIdentity(t, bhcrypto.AESGCM)
	now := time.Now()

	_, fromStranger, _ := stranger.CreateInitiation(b.id.Public, 7, now)
	sendRaw(t, b.bind.LocalAddr(), fromStranger)
	waitDrop(t, b.r, Outside, ReasonUnknownPeer, 1)

	_, badMAC, _ := a.id.CreateInitiation(b.id.Public, 8, now)
	badMAC[20] ^= 0xff
	sendRaw(t, b.bind.LocalAddr(), badMAC)
	waitDrop(t, b.r, Outside, ReasonBadMAC, 1)

	_, good, _ := a.id.CreateInitiation(b.id.Public, 9, now)
	sendRaw(t, b.bind.LocalAddr(), good)
	deadline := time.Now().Add(5 * time.Second)
	for b.r.Handshakes().Answered < 1 {
		if time.Now().After(deadline) {
			t.Fatal("fresh initiation not answered")
		}
		time.Sleep(5 * time.Millisecond)
	}
	sendRaw(t, b.bind.LocalAddr(), good) // replay
	waitDrop(t, b.r, Outside, ReasonStaleHandshake, 1)
	if n := b.r.Handshakes().Answered; n != 1 {
		t.Fatalf("replayed initiation answered (%d answers)", n)
	}
}

// TestSimultaneousInitiation: both gateways start a handshake at the same
// moment; both directions work afterwards.
func TestSimultaneousInitiation(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.ChaChaPoly, nil)
	pa := udpPacket(t, podA, podB, []byte("a->b"))
	pb := udpPacket(t, podB, podA, []byte("b->a"))
	a.tun.Inject(pa)
	b.tun.Inject(pb)
	b.expectPacket(t)
	a.expectPacket(t)
	for i := range 20 {
		a.tun.Inject(pa)
		b.tun.Inject(pb)
		b.expectPacket(t)
		a.expectPacket(t)
		_ = i
	}
}

// TestAbandonedInitiationsForgotten: an initiation replaced by a
// retransmission, or given up, keeps no usable ephemeral key: a response
// to it can no longer complete it.
func TestAbandonedInitiationsForgotten(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	p := h.a.state.Load().peers[h.b.keys.Load().Current.Public]
	answer := func() []byte {
		ri, err := h.b.keys.Load().Current.ConsumeInitiation(append([]byte(nil), h.bindA.last[:h.bindA.n]...))
		if err != nil {
			t.Fatal(err)
		}
		_, resp, err := h.b.keys.Load().Current.CreateResponse(ri, 99, h.now)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	h.a.hs.initiate(p, h.now, false)
	first, resp1 := p.hs.pending, answer()
	h.a.hs.initiate(p, h.now.Add(RekeyTimeout), true)
	if _, err := first.ConsumeResponse(resp1, h.now); err == nil {
		t.Fatal("an initiation replaced by a retransmission still completes")
	}
	second, resp2 := p.hs.pending, answer()
	h.a.hs.timers(h.now.Add(RekeyAttemptTime + RekeyTimeout + RekeyJitter))
	if p.hs.pending != nil {
		t.Fatal("handshake did not give up")
	}
	if _, err := second.ConsumeResponse(resp2, h.now); err == nil {
		t.Fatal("a given-up initiation still completes")
	}
}
