//go:build linux

package udp

import (
	"bytes"
	"errors"
	"net/netip"
	"os/exec"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// refusals are ways to make the kernel refuse datagrams to one
// destination while others on the same socket go through: the setup
// commands run in a namespace of the test's own (ownNetns), and want is
// the error sendmmsg returns for dst.
var refusals = []struct {
	name  string
	setup [][]string // argument lists; "nft" first runs nft, else ip
	dst   string
	want  unix.Errno
}{
	{"no-route", nil, "10.9.0.4:9", unix.ENETUNREACH},
	{"unreachable-route", [][]string{{"route", "add", "unreachable", "10.9.0.1/32"}}, "10.9.0.1:9", unix.EHOSTUNREACH},
	{"prohibit-route", [][]string{{"route", "add", "prohibit", "10.9.0.2/32"}}, "10.9.0.2:9", unix.EACCES},
	{"blackhole-route", [][]string{{"route", "add", "blackhole", "10.9.0.3/32"}}, "10.9.0.3:9", unix.EINVAL},
	{"firewall-drop", [][]string{
		{"nft", "add", "table", "inet", "udptest"},
		{"nft", "add", "chain", "inet", "udptest", "out", "{ type filter hook output priority 0; }"},
		{"nft", "add", "rule", "inet", "udptest", "out", "ip", "daddr", "127.0.0.9", "drop"},
	}, "127.0.0.9:9", unix.EPERM},
}

// refusingNetns enters a namespace of the test's own where setup makes
// the kernel refuse datagrams to one destination.
func refusingNetns(t *testing.T, setup [][]string) {
	t.Helper()
	ownNetns(t)
	for _, args := range setup {
		if args[0] != "nft" {
			ip(t, args...)
			continue
		}
		if _, err := exec.LookPath("nft"); err != nil {
			t.Skip("needs the nft command")
		}
		if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
}

// receiveWithin is receiveN that gives up (closing r) after d.
func receiveWithin(r *LinuxBind, in *batch, want int, d time.Duration) error {
	timer := time.AfterFunc(d, func() { _ = r.Close() })
	defer timer.Stop()
	return receiveN(r, in, want)
}

// TestSendManyPastFailure: a batch to three destinations whose middle one
// the kernel refuses (no route, an unreachable, prohibit or blackhole
// route, a firewall drop) still reaches the first and the third, as
// single datagrams and as segmented runs; SendMany reports the refusal,
// and a refusal about the destination leaves GSO on.
func TestSendManyPastFailure(t *testing.T) {
	for _, rf := range refusals {
		for _, run := range []int{1, 4} {
			name := rf.name + "/single"
			if run > 1 {
				name = rf.name + "/runs"
			}
			t.Run(name, func(t *testing.T) {
				refusingNetns(t, rf.setup)
				a := listen(t, "127.0.0.1:0", Options{})
				b := listen(t, "127.0.0.1:0", Options{})
				c := listen(t, "127.0.0.1:0", Options{})
				bad := netip.MustParseAddrPort(rf.dst)
				var bufs [][]byte
				var eps []netip.AddrPort
				for i, ep := range []netip.AddrPort{b.LocalAddr(), bad, c.LocalAddr()} {
					for j := range run {
						bufs = append(bufs, bytes.Repeat([]byte{byte(i*16 + j)}, 200))
						eps = append(eps, ep)
					}
				}
				gso := a.GSO()
				err := a.SendMany(bufs, eps)
				if !errors.Is(err, rf.want) {
					t.Errorf("SendMany: %v, want %v", err, rf.want)
				}
				for i, r := range []*LinuxBind{b, c} {
					in := newBatch(run, 2048)
					if err := receiveWithin(r, in, run, 2*time.Second); err != nil {
						t.Errorf("destination %d of 3 got no datagram within 2s (%v)", 2*i+1, err)
						continue
					}
					for j := range run {
						want := bufs[2*i*run+j]
						if got := in.bufs[j][:in.sizes[j]]; !bytes.Equal(got, want) {
							t.Errorf("destination %d datagram %d: % x, want % x", 2*i+1, j, got[:4], want[:4])
						}
					}
				}
				if gso && !a.GSO() {
					t.Errorf("a refusal of the destination (%v) turned GSO off", rf.want)
				}
				if c := a.tx.gso.limit.Load(); c != nil {
					t.Errorf("a refusal of the destination (%v) capped segments at %d", rf.want, c.maxSeg)
				}
			})
		}
	}
}

// TestSendManyEach: SendManyEach reports the refused datagrams (the
// middle destination's run) by their error and leaves the others nil;
// SendFailures counts them under their reason; Send counts its whole
// refused batch; neither the refusal nor the report allocates.
func TestSendManyEach(t *testing.T) {
	for _, rf := range refusals {
		t.Run(rf.name, func(t *testing.T) {
			refusingNetns(t, rf.setup)
			a := listen(t, "127.0.0.1:0", Options{})
			b := listen(t, "127.0.0.1:0", Options{})
			c := listen(t, "127.0.0.1:0", Options{})
			bad := netip.MustParseAddrPort(rf.dst)
			const run = 3
			var bufs [][]byte
			var eps []netip.AddrPort
			for _, ep := range []netip.AddrPort{b.LocalAddr(), bad, c.LocalAddr(), bad} {
				for range run {
					bufs = append(bufs, make([]byte, 100))
					eps = append(eps, ep)
				}
			}
			errs := make([]error, len(bufs))
			reason := sendReason(rf.want)
			in := newBatch(run, 2048)
			watchdog(t, b)
			watchdog(t, c)
			round := func() {
				failed, err := a.SendManyEach(bufs, eps, errs)
				if err != nil || failed != 2*run {
					t.Fatalf("SendManyEach: %d refused, %v; want %d, nil", failed, err, 2*run)
				}
				for _, r := range []*LinuxBind{b, c} {
					if err := receiveN(r, in, run); err != nil {
						t.Fatalf("%v: %v", r.LocalAddr(), err)
					}
				}
			}
			before := a.SendFailures(reason)
			round()
			for i, err := range errs {
				if want := eps[i] == bad; (err != nil) != want || want && !errors.Is(err, rf.want) {
					t.Errorf("datagram %d to %v: %v", i, eps[i], err)
				}
			}
			if got := a.SendFailures(reason) - before; got != 2*run {
				t.Errorf("SendFailures(%v) grew by %d, want %d", reason, got, 2*run)
			}
			if allocs := testing.AllocsPerRun(20, round); allocs != 0 {
				t.Errorf("SendManyEach with a refused destination allocates %v times", allocs)
			}
			before = a.SendFailures(reason)
			if err := a.Send(bufs[:2*run], bad); !errors.Is(err, rf.want) {
				t.Errorf("Send to %v: %v, want %v", bad, err, rf.want)
			}
			if got := a.SendFailures(reason) - before; got != 2*run {
				t.Errorf("Send: SendFailures(%v) grew by %d, want %d", reason, got, 2*run)
			}
			for r := range NumSendReasons {
				if r != reason && a.SendFailures(r) != 0 {
					t.Errorf("SendFailures(%v) = %d", r, a.SendFailures(r))
				}
			}
		})
	}
}
