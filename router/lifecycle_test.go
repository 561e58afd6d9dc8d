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
	if err := a.r.SetConfig(cfg); err != nil {
		t.Fatal(err)
	}
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	rx := func() uint64 { return b.r.Peers()[0].RxPackets }
	base := rx()
	// B answers A's data with a passive keepalive after
	// KeepaliveTimeout. Wait until A has it, so that A does not take B
	// for dead at NoAnswerTimeout (and re-handshake) only because the
	// fake clock ran ahead of the loopback delivery.
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

// TestDeadPeerRehandshake: when a peer stops answering while we send, it
// is reported down and a new handshake starts after NoAnswerTimeout.
func TestDeadPeerRehandshake(t *testing.T) {
	clock := newFakeClock()
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, clock)
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)
	b.tun.Inject(udpPacket(t, podB, podA, []byte("back")))
	a.expectPacket(t)
	before := a.r.Handshakes().Initiated
	b.close(t) // B's process is gone: nothing answers any more
	for i := range int(NoAnswerTimeout/time.Second) + 2 {
		tx := a.r.Peers()[0].TxPackets
		a.tun.Inject(udpPacket(t, podA, podB, []byte("into the void")))
		waitFor(t, "send", func() bool { return a.r.Peers()[0].TxPackets > tx })
		if a.r.Peers()[0].Down && i < int(NoAnswerTimeout/time.Second) {
			t.Fatalf("peer reported down after %d s, before NoAnswerTimeout", i)
		}
		clock.Advance(time.Second)
	}
	waitFor(t, "a new handshake", func() bool { return a.r.Handshakes().Initiated > before })
	waitFor(t, "peer reported down", func() bool { return a.r.Peers()[0].Down })
}

// TestForgottenSessionRecovers: a gateway that lost its sessions (it
// restarted) and sees a configured peer keep sending on one of them
// starts a handshake itself; traffic recovers without waiting for the
// sender's timers.
func TestForgottenSessionRecovers(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
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
	before := a.r.Handshakes().Initiated
	send(101)
	if a.r.Handshakes().Initiated == before {
		t.Fatal("an expired session was used without a new handshake")
	}
}

// TestRoamingOnlyWhenAuthenticated: a forged datagram from a new address
// does not move the peer; an authentic one does.
func TestRoamingOnlyWhenAuthenticated(t *testing.T) {
	h := newHotPair(t, bhcrypto.AESGCM)
	in := h.a.newInsideBatch()
	out := h.b.newOutsideBatch()
	pkt := udpPacket(t, podA, podB, []byte("roam"))
	peerA := h.b.state.Load().peers[h.a.id.Public]
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
