package router

import (
	"bytes"
	"fmt"
	"testing"

	"go.uber.org/goleak"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestPairBothWays sends packets both ways through two gateways on channel
// TUNs and loopback UDP, IPv4 and IPv6, with both ciphers: what comes out
// of the far TUN is byte for byte what went into the near one.
func TestPairBothWays(t *testing.T) {
	for _, cipher := range []bhcrypto.CipherKind{bhcrypto.AESGCM, bhcrypto.ChaChaPoly} {
		t.Run(cipher.String(), func(t *testing.T) {
			a, b := newLoopbackPair(t, cipher, nil)
			for i, tc := range []struct {
				from, to *gateway
				pkt      []byte
			}{
				{a, b, udpPacket(t, podA, podB, []byte("hello from A"))},
				{b, a, udpPacket(t, podB, podA, []byte("hello from B"))},
				{a, b, udpPacket(t, podA6, podB6, []byte("v6 from A"))},
				{b, a, udpPacket(t, podB6, podA6, []byte("v6 from B"))},
				{a, b, udpPacket(t, podA, podB, bytes.Repeat([]byte{0xab}, 1420-28))}, // exactly MTU
				{a, b, udpPacket(t, podA, podB, nil)},                                 // needs padding
			} {
				if err := tc.from.tun.Inject(tc.pkt); err != nil {
					t.Fatal(err)
				}
				got := tc.to.expectPacket(t)
				if !bytes.Equal(got, tc.pkt) {
					t.Fatalf("case %d: delivered packet differs:\n got % x\nwant % x", i, got, tc.pkt)
				}
			}
			// Many packets in a row keep their order.
			for i := range 200 {
				if err := a.tun.Inject(udpPacket(t, podA, podB, []byte(fmt.Sprint(i)))); err != nil {
					t.Fatal(err)
				}
			}
			for i := range 200 {
				got := b.expectPacket(t)
				if want := udpPacket(t, podA, podB, []byte(fmt.Sprint(i))); !bytes.Equal(got, want) {
					t.Fatalf("packet %d out of order or changed", i)
				}
			}
			for _, g := range []*gateway{a, b} {
				for _, r := range Reasons() {
					for _, d := range []Direction{Inside, Outside} {
						if n := g.r.drops.Get(d, r); n != 0 {
							t.Errorf("%s dropped %d packets for %s/%s", g.tun.Name(), n, d, r)
						}
					}
				}
			}
			// Counters are bumped after Send returns: the far side may
			// have the packets first.
			waitFor(t, "A's counters", func() bool { return a.r.Peers()[0].TxPackets >= 203 })
			ps := a.r.Peers()
			if len(ps) != 1 || ps[0].TxPackets < 203 || ps[0].RxPackets < 2 || ps[0].LastHandshake.IsZero() {
				t.Errorf("peer stats of A: %+v", ps)
			}
		})
	}
}

// TestSpoofedSourceDropped: B delivers only packets whose inner source is
// in the sending gateway's site, and only to its own site.
func TestSpoofedSourceDropped(t *testing.T) {
	a, b := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	// Establish the session first.
	a.tun.Inject(udpPacket(t, podA, podB, []byte("hi")))
	b.expectPacket(t)

	spoofed := []struct {
		name string
		src  string
		dst  string
		want Reason
	}{
		{"source in no site", "10.99.0.1", "10.245.1.10", ReasonSpoofedSource},
		{"source in the receiver's own site", "10.245.7.7", "10.245.1.10", ReasonSpoofedSource},
		{"IPv6 source in no site", "fd00:999::1", "fd00:245:0:1::10", ReasonSpoofedSource},
	}
	for i, tc := range spoofed {
		pkt := udpPacket(t, mustAddr(tc.src), mustAddr(tc.dst), []byte(tc.name))
		a.tun.Inject(pkt)
		waitDrop(t, b.r, Outside, tc.want, uint64(i+1))
	}
	b.expectNoPacket(t)
	// A genuine packet still goes through afterwards.
	good := udpPacket(t, podA, podB, []byte("still fine"))
	a.tun.Inject(good)
	if got := b.expectPacket(t); !bytes.Equal(got, good) {
		t.Fatal("genuine packet after spoofed ones not delivered intact")
	}
}

// TestInsideDrops: the inside path refuses what it cannot route.
func TestInsideDrops(t *testing.T) {
	a, _ := newLoopbackPair(t, bhcrypto.AESGCM, nil)
	cases := []struct {
		name string
		pkt  []byte
		want Reason
	}{
		{"no route", udpPacket(t, podA, mustAddr("8.8.8.8"), nil), ReasonNoRoute},
		{"multicast", udpPacket(t, mustAddr("fe80::1"), mustAddr("ff02::16"), nil), ReasonNotUnicast},
		{"link-local", udpPacket(t, mustAddr("fe80::1"), mustAddr("fe80::2"), nil), ReasonNotUnicast},
		{"own site", udpPacket(t, podA, mustAddr("10.244.2.2"), nil), ReasonLocalDestination},
		{"garbage", []byte{0x00, 0x01, 0x02}, ReasonMalformed},
		{"empty", []byte{}, ReasonMalformed},
		{"bad version", append([]byte{0x55}, make([]byte, 40)...), ReasonMalformed},
	}
	for _, tc := range cases {
		before := a.r.drops.Get(Inside, tc.want)
		a.tun.Inject(tc.pkt)
		waitDrop(t, a.r, Inside, tc.want, before+1)
	}
}
