package router

import (
	"net/netip"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// TestPeerBehindNAT: a gateway without endpoint is not initiated to (no
// failed sends, no unreachable warnings); its own handshake sets the
// session up, and traffic flows both ways to where it came from.
func TestPeerBehindNAT(t *testing.T) {
	gws := newGateways(t, bhcrypto.AESGCM, nil, "bh-a", "bh-b")
	a, b := gws[0], gws[1]
	// A's key is the lower: by the key rule A would go first, toward
	// nowhere, and B would wait RekeyTimeout before stepping in.
	leaderFirst(a, b)
	// A knows no endpoint for B; B knows A's.
	a.start(t, twoSiteConfig("site-a", a.id.Public, b.id.Public, a.bind.LocalAddr(), netip.AddrPort{}))
	cfgB := twoSiteConfig("site-b", a.id.Public, b.id.Public, a.bind.LocalAddr(), b.bind.LocalAddr())
	cfgB.BehindNAT = true
	start := time.Now()
	b.start(t, cfgB)
	// B sets its session with A up at once, without traffic.
	waitSession(t, a, b.id.Public, start, "B waited for A to go first")
	if err := b.tun.Inject(udpPacket(t, podB, podA, []byte("from behind the NAT"))); err != nil {
		t.Fatal(err)
	}
	a.expectPacket(t)
	if err := a.tun.Inject(udpPacket(t, podA, podB, []byte("and back"))); err != nil {
		t.Fatal(err)
	}
	b.expectPacket(t)
	time.Sleep(100 * time.Millisecond)
	p := a.r.state.Load().peers[b.id.Public]
	if n := p.hsSendFailed.Load(); n != 0 {
		t.Errorf("A failed %d handshake sends toward the gateway without endpoint", n)
	}
	if p.Endpoint() != b.bind.LocalAddr() {
		t.Errorf("A sends to B at %v, want where B came from, %v", p.Endpoint(), b.bind.LocalAddr())
	}
}
