package router

import (
	"net/netip"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/ratelimit"
	"github.com/bridgehead/bridgehead/tun"
)

// TestICMPResponderPart drives icmpResponder alone on a channel TUN:
// every oversized packet counts as too_big; one with DF gets an error
// from the site's ICMP source, at most ICMPBurst per source at once;
// without DF, or without a source address, nothing is sent.
func TestICMPResponderPart(t *testing.T) {
	dev := tun.NewChannel("bh-icmp", 1420)
	t.Cleanup(func() { dev.Close() })
	clock := newFakeClock()
	var drops Drops
	i := newICMPResponder(&tunDevice{Device: dev}, &drops, 1420, ratelimit.New(ICMPRate, ICMPBurst, 4096, clock.Now))
	st := &routingState{icmp4: netip.MustParseAddr("10.224.0.4")}
	big := udpPacket(t, podA, podB, make([]byte, 1440-28)) // DF set
	noDF := udpPacket(t, podA, podB, make([]byte, 1440-28))
	noDF[6] &^= 0x40

	for range ICMPBurst + 5 {
		i.tooBig(st, big)
	}
	i.tooBig(st, noDF)
	i.tooBig(&routingState{}, big) // no ICMP source configured
	if got := drops.Get(Inside, ReasonTooBig); got != ICMPBurst+7 {
		t.Errorf("too_big drops %d, want %d", got, ICMPBurst+7)
	}
	sent := 0
	for {
		select {
		case p := <-dev.Outbound():
			if netip.AddrFrom4([4]byte(p[12:16])) != st.icmp4 || p[9] != 1 {
				t.Errorf("not an ICMP error from %s: % x", st.icmp4, p[:20])
			}
			sent++
			continue
		case <-time.After(100 * time.Millisecond):
		}
		break
	}
	if sent != ICMPBurst {
		t.Errorf("%d ICMP errors sent, want the burst of %d", sent, ICMPBurst)
	}
}
