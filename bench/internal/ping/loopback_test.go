package ping

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// TestLoopback pings the loopback of a new namespace: every echo comes
// back, and each reply's kernel-stamped time ends before its read.
func TestLoopback(t *testing.T) {
	ns := netnstest.New(t, "bhpingtest")
	lo := netip.MustParseAddr("127.0.0.1")
	r, err := Run(context.Background(), ns, lo, lo, 10*time.Millisecond, 200*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent < 5 || r.Lost() != 0 || len(r.KernelRTTs) != len(r.RTTs) {
		t.Fatalf("sent %d: %d replies, %d kernel-stamped", r.Sent, len(r.RTTs), len(r.KernelRTTs))
	}
	for i, x := range r.RTTs {
		if k := r.KernelRTTs[i]; x <= 0 || x > 1000 || k <= 0 || k >= x {
			t.Fatalf("reply %d: read after %v ms, kernel-stamped %v ms", i, x, k)
		}
	}
}
