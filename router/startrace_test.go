package router

import (
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// TestFollowerStartsAfterLostInitiation: two gateways started together.
// The one with the lower key (which goes first) starts before the other
// listens, so its initiation is lost. The other must not wait RekeyTimeout
// for the leader's retransmission: it has never reached the leader, so it
// initiates at once and the pair has a session right after it starts.
// (Seen in CI: a ping right after the lab came up waited 5 s.)
func TestFollowerStartsAfterLostInitiation(t *testing.T) {
	gws := newGateways(t, bhcrypto.AESGCM, nil, "bh-a", "bh-b")
	a, b := gws[0], gws[1]
	leaderFirst(a, b)
	// B's port, with nothing listening on it while A starts.
	epB := b.bind.LocalAddr()
	b.bind.Close()

	a.start(t, twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), epB))
	pa := a.r.state.Load().peers[b.id.Public]
	for pa.hsInitiated.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the initiation is gone (port unreachable)

	var err error
	if b.bind, err = udp.Listen(epB, udp.Options{}); err != nil {
		t.Fatalf("reopening B's port: %v", err)
	}
	start := time.Now()
	b.start(t, twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), epB))
	took := waitSession(t, a, b.id.Public, start, "B waited for A's retransmission")
	t.Logf("session %v after B started", took.Round(time.Millisecond))
	if err := a.tun.Inject(udpPacket(t, podA, podB, []byte("right after start"))); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	if err := b.tun.Inject(udpPacket(t, podB, podA, []byte("and back"))); err != nil {
		t.Fatal(err)
	}
	a.expectPacket(t)
}
