package router

import (
	"bytes"
	"fmt"
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// waitFor polls cond for up to 5 s.
func waitFor(t *testing.T, what string, cond func() bool, state ...func() string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			for _, s := range state {
				t.Log(s())
			}
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestKeepalive: with keepalive configured, an idle session carries an
// empty authenticated message every interval; without it, nothing.
func TestKeepalive(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, clock)
	cfg := twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfg.Sites[1].Gateways[0].Keepalive = 25 * time.Second
	// Probes would also cross the idle session; keep them out of the
	// count (they keep it alive on their own, see TestProbes).
	cfg.Sites[1].Gateways[0].ProbeInterval = MaxProbeInterval
	if err := a.r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB.Sites[0].Gateways[0].ProbeInterval = MaxProbeInterval
	if err := b.r.SetConfig(cfgB); err != nil {
		t.Fatal(err)
	}
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	// Each side probes once on a new session to learn whether the
	// other reads lane bytes: let those cross before counting.
	for i := 0; ; i++ {
		if a.r.state.Load().peers[b.id.Public].laneSession.Load() != 0 &&
			b.r.state.Load().peers[a.id.Public].laneSession.Load() != 0 {
			break
		}
		if i == 100 {
			t.Fatal("lane probes not answered")
		}
		if i%10 == 0 {
			clock.Advance(ProbeTick)
		}
		time.Sleep(10 * time.Millisecond)
	}
	// Then data from A again, later than anything B sent.
	clock.Advance(time.Second)
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	rx := func() uint64 { return b.r.Peers()[0].RxPackets }
	base := rx()
	// B answers A's data with a passive keepalive after
	// KeepaliveTimeout. Wait until A has it, so that the counts below
	// do not depend on how far the fake clock ran ahead of loopback
	// delivery.
	aRx := func() uint64 { return a.r.Peers()[0].RxPackets }
	aBase := aRx()
	clock.Step(KeepaliveTimeout + time.Second)
	waitFor(t, "B's passive keepalive at A", func() bool { return aRx() > aBase })
	clock.Step(20*time.Second - KeepaliveTimeout - time.Second)
	time.Sleep(100 * time.Millisecond)
	if rx() != base {
		t.Fatalf("keepalive before the interval")
	}
	clock.Step(6 * time.Second)
	waitFor(t, "first keepalive", func() bool { return rx() == base+1 }, func() string {
		p := a.r.state.Load().peers[b.id.Public]
		return fmt.Sprintf("rx %d base %d; A sent %v recv %v; now %v", rx(), base, p.mono.time(p.lastSend.Load()), p.mono.time(p.lastReceive.Load()), clock.Now())
	})
	clock.Step(25 * time.Second)
	waitFor(t, "second keepalive", func() bool { return rx() == base+2 })
	b.expectNoPacket(t) // keepalives are not written to the TUN
}

// TestDeadPeerDown: when a peer stops answering, it is probed and
// reported down after ProbeMisses probe intervals of silence, not before.
func TestDeadPeerDown(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, clock)
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	b.tun.Inject(udpPacket(t, podB, podA, []byte("back")))
	a.expectPacket(t)
	clock.Advance(ProbeTick) // both see the other up
	waitFor(t, "B up at A", func() bool { return a.r.Peers()[0].Live.State == LiveUp })
	probes := a.r.Peers()[0].Live.ProbesSent
	b.close(t) // B's process is gone: nothing answers any more
	step := DefaultProbeInterval / 4
	// A last heard B one ProbeTick ago.
	for elapsed := ProbeTick + step; elapsed <= ProbeMisses*DefaultProbeInterval; elapsed += step {
		clock.Advance(step)
		if a.r.Peers()[0].Down {
			t.Fatalf("peer reported down after %s, before %d probe intervals", elapsed, ProbeMisses)
		}
	}
	// A packet B sent before it closed may reach A late, at a later
	// fake time: allow a few more steps.
	for range 2 * ProbeMisses * 4 {
		if a.r.Peers()[0].Down {
			break
		}
		clock.Advance(step)
		time.Sleep(time.Millisecond)
	}
	waitFor(t, "peer reported down", func() bool { return a.r.Peers()[0].Down })
	if got := a.r.Peers()[0].Live.ProbesSent - probes; got < ProbeMisses-1 {
		t.Errorf("%d probes sent while B was silent, want at least %d", got, ProbeMisses-1)
	}
}

// TestForgottenSessionRecovers: a gateway that lost its sessions (it
// restarted) and sees a configured peer keep sending on one of them
// starts a handshake itself; traffic recovers without waiting for the
// sender's timers.
func TestForgottenSessionRecovers(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, newFakeClock()) // no proactive handshakes
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	pa := b.r.state.Load().peers[a.id.Public]
	gone := pa.keypairs.forget()
	b.r.retire(gone[:]...)
	initiated := b.r.Handshakes().Initiated
	good := udpPacket(t, podA, podB, []byte("again"))
	deadline := time.Now().Add(5 * time.Second)
	for {
		a.tun.Inject(good)
		select {
		case got := <-b.tun.Outbound():
			if !bytes.Equal(got, good) {
				t.Fatalf("unexpected packet % x", got)
			}
			if b.r.Handshakes().Initiated <= initiated {
				t.Fatal("recovered without B starting a handshake")
			}
			if b.r.drops.Get(Outside, ReasonUnknownIndex) == 0 {
				t.Fatal("B should have dropped packets for its forgotten session")
			}
			return
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("traffic did not recover")
		}
	}
}

// TestRekeyWithoutLoss: past RekeyAfterTime the initiator starts a new
// handshake while still sending on the old session; packets keep flowing
// and the old session keeps receiving until the new one is confirmed.
func TestRekeyWithoutLoss(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.ChaChaPoly, clock)
	send := func(i int) {
		pkt := udpPacket(t, podA, podB, []byte{byte(i)})
		a.tun.Inject(pkt)
		if got := b.expectPacket(t); !bytes.Equal(got, pkt) {
			t.Fatalf("packet %d changed", i)
		}
	}
	send(0)
	first := a.r.Peers()[0].SessionCreated
	clock.Advance(RekeyAfterTime + time.Second)
	for i := 1; i <= 50; i++ {
		send(i)
	}
	waitFor(t, "rekey", func() bool { return a.r.Peers()[0].SessionCreated.After(first) })
	for i := 51; i <= 100; i++ {
		send(i)
	}
	if n := a.r.drops.Get(Inside, ReasonExpired) + b.r.drops.Get(Outside, ReasonExpired); n != 0 {
		t.Fatalf("%d packets dropped as expired", n)
	}
	// Past RejectAfterTime without traffic, the old session is not used.
	clock.Advance(RejectAfterTime + time.Second)
	send(101)
	if created := a.r.Peers()[0].SessionCreated; clock.Now().Sub(created) >= RejectAfterTime {
		t.Fatalf("an expired session (from %v, now %v) was used without a new handshake", created, clock.Now())
	}
}

// TestRoamingOnlyWhenAuthenticated: a forged datagram from a new address
// does not move the peer; an authentic one does.
func TestRoamingOnlyWhenAuthenticated(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	pkt := udpPacket(t, podA, podB, []byte("roam"))
	peerA := h.b.state.Load().peers[h.a.keys.Load().Current.Public]
	moved := netip.MustParseAddrPort("198.51.100.9:40000")

	h.a.routeBatch(refill(in, pkt), 1, h.now)
	forged := append([]byte(nil), h.bindA.last[:h.bindA.n]...)
	forged[20] ^= 1
	out.sizes[0] = copy(out.bufs[0], forged)
	out.eps[0] = moved
	h.b.receiveBatch(out, 1, h.now)
	if peerA.Endpoint() == moved {
		t.Fatal("a forged datagram moved the peer")
	}
	h.a.routeBatch(refill(in, pkt), 1, h.now)
	out.sizes[0] = copy(out.bufs[0], h.bindA.last[:h.bindA.n])
	out.eps[0] = moved
	h.b.receiveBatch(out, 1, h.now)
	if peerA.Endpoint() != moved {
		t.Fatalf("authentic datagram from %s did not move the peer (at %s)", moved, peerA.Endpoint())
	}
}
