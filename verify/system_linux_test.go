package verify

import (
	"context"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// TestPingDatagram: without CAP_NET_RAW (a verify pod of the restricted
// Pod Security level) the echo goes through an ICMP datagram socket,
// which the pod's net.ipv4.ping_group_range allows, with the same sizes
// and don't-fragment.
func TestPingDatagram(t *testing.T) {
	netnstest.Enter(t)
	lo := netip.MustParseAddr("127.0.0.1")
	ctx := context.Background()
	// Off by default ("1 0"): the socket is refused, and says why.
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("1 0"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := ping(ctx, netip.Addr{}, lo, 100, time.Second, true); err == nil {
		t.Fatal("ping socket opened outside ping_group_range")
	}
	if err := os.WriteFile("/proc/sys/net/ipv4/ping_group_range", []byte("0 2147483647"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{100, 1500, 65535} {
		if rtt, err := ping(ctx, netip.Addr{}, lo, size, time.Second, true); err != nil || rtt <= 0 {
			t.Errorf("ping %d bytes over a datagram socket: %v, %v", size, rtt, err)
		}
	}
	if _, err := ping(ctx, netip.Addr{}, lo, 65536+100, time.Second, true); err == nil {
		t.Error("a packet over lo's MTU was answered: don't-fragment is not set")
	}
	if _, err := ping(ctx, netip.Addr{}, netip.MustParseAddr("10.9.9.9"), 100, 300*time.Millisecond, true); err == nil {
		t.Error("ping to an address with no route answered")
	}
}
