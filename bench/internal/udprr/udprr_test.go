package udprr

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// TestLoopback runs a short series between two addresses of one new
// namespace's loopback: every request is answered.
func TestLoopback(t *testing.T) {
	ns := netnstest.New(t, "bhrrtest")
	r, err := Run(context.Background(), Spec{
		ClientNS: ns, ServerNS: ns,
		Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.2"),
		Port: 7007, Size: 64, Interval: 10 * time.Millisecond, Duration: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sent < 5 || r.Lost() != 0 || len(r.RTTs) != r.Sent {
		t.Fatalf("sent %d, %d responses", r.Sent, len(r.RTTs))
	}
	if len(r.KernelRTTs) != len(r.RTTs) {
		t.Fatalf("%d kernel-stamped RTTs, %d RTTs", len(r.KernelRTTs), len(r.RTTs))
	}
	for i, x := range r.RTTs {
		if x <= 0 || x > 1000 {
			t.Fatalf("RTT %v ms", x)
		}
		// The kernel stamps a response before the goroutine reads it.
		if k := r.KernelRTTs[i]; k <= 0 || k >= x {
			t.Fatalf("response %d: kernel-stamped RTT %v ms, read after %v ms", i, k, x)
		}
	}
}

func TestRejectsSmallSize(t *testing.T) {
	if _, err := Run(context.Background(), Spec{Size: 8, Interval: time.Millisecond}); err == nil {
		t.Fatal("size 8 accepted")
	}
}
