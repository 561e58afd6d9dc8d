//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	"golang.org/x/sys/unix"
)

// listen opens a bind for the test and closes it when the test ends.
func listen(t testing.TB, addr string, opts Options) *LinuxBind {
	t.Helper()
	b, err := Listen(netip.MustParseAddrPort(addr), opts)
	if err != nil {
		t.Fatalf("Listen(%s): %v", addr, err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// listen6 is listen for IPv6 loopback, skipping the test without it.
func listen6(t testing.TB, opts Options) *LinuxBind {
	t.Helper()
	b, err := Listen(netip.MustParseAddrPort("[::1]:0"), opts)
	if err != nil {
		t.Skipf("no IPv6 loopback: %v", err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return b
}

// batch is a set of receive or send buffers.
type batch struct {
	bufs  [][]byte
	sizes []int
	eps   []netip.AddrPort
}

func newBatch(n, size int) *batch {
	bt := &batch{bufs: make([][]byte, n), sizes: make([]int, n), eps: make([]netip.AddrPort, n)}
	for i := range bt.bufs {
		bt.bufs[i] = make([]byte, size)
	}
	return bt
}

// receiveN receives exactly want datagrams into bt, in as many Receive
// calls as it takes. It allocates nothing.
func receiveN(b *LinuxBind, bt *batch, want int) error {
	for got := 0; got < want; {
		n, err := b.Receive(bt.bufs[got:want], bt.sizes[got:want], bt.eps[got:want])
		if err != nil {
			return err
		}
		got += n
	}
	return nil
}

// watchdog closes b if the test hangs, so that a blocked Receive fails.
func watchdog(t *testing.T, b *LinuxBind) {
	timer := time.AfterFunc(10*time.Second, func() { _ = b.Close() })
	t.Cleanup(func() { timer.Stop() })
}

// exchange sends 64 datagrams of varied sizes from a to dst (an address of
// b) and checks that b receives them intact, in order, from wantSrc.
func exchange(t *testing.T, a, b *LinuxBind, dst, wantSrc netip.AddrPort) {
	t.Helper()
	const n = 64
	out := make([][]byte, n)
	for i := range out {
		out[i] = bytes.Repeat([]byte{byte(i)}, 1+i*20)
	}
	if err := a.Send(out, dst); err != nil {
		t.Fatalf("Send to %v: %v", dst, err)
	}
	in := newBatch(n, 2048)
	if err := receiveN(b, in, n); err != nil {
		t.Fatalf("Receive: %v", err)
	}
	for i := range n {
		if got := in.bufs[i][:in.sizes[i]]; !bytes.Equal(got, out[i]) {
			t.Fatalf("datagram %d: %d bytes, want %d", i, len(got), len(out[i]))
		}
		if in.eps[i] != wantSrc {
			t.Fatalf("datagram %d from %v, want %v", i, in.eps[i], wantSrc)
		}
	}
}

func TestLoopbackIPv4(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	watchdog(t, b)
	watchdog(t, a)
	if a.BatchSize() != DefaultBatchSize || !a.LocalAddr().Addr().Is4() || a.LocalAddr().Port() == 0 {
		t.Fatalf("BatchSize %d, LocalAddr %v", a.BatchSize(), a.LocalAddr())
	}
	exchange(t, a, b, b.LocalAddr(), a.LocalAddr())
	exchange(t, b, a, a.LocalAddr(), b.LocalAddr())
	// A v4-mapped destination is accepted on an IPv4 socket.
	mapped := netip.AddrPortFrom(netip.AddrFrom16(b.LocalAddr().Addr().As16()), b.LocalAddr().Port())
	exchange(t, a, b, mapped, a.LocalAddr())
}

func TestLoopbackIPv6(t *testing.T) {
	a := listen6(t, Options{})
	b := listen6(t, Options{})
	watchdog(t, b)
	exchange(t, a, b, b.LocalAddr(), a.LocalAddr())
}

func TestDualStack(t *testing.T) {
	d := listen(t, "[::]:0", Options{})
	v4 := listen(t, "127.0.0.1:0", Options{})
	watchdog(t, d)
	watchdog(t, v4)
	if !d.v6 || d.LocalAddr().Addr() != netip.IPv6Unspecified() {
		t.Fatalf("dual-stack bind: v6=%v local %v", d.v6, d.LocalAddr())
	}
	port := d.LocalAddr().Port()
	// An IPv4 peer is reported unmapped...
	exchange(t, v4, d, netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port), v4.LocalAddr())
	// ...and can be answered at that plain IPv4 address or its mapped form.
	from := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), port)
	exchange(t, d, v4, v4.LocalAddr(), from)
	mapped := netip.AddrPortFrom(netip.AddrFrom16(v4.LocalAddr().Addr().As16()), v4.LocalAddr().Port())
	exchange(t, d, v4, mapped, from)

	v6, err := Listen(netip.MustParseAddrPort("[::1]:0"), Options{})
	if err != nil {
		t.Logf("no IPv6 loopback, skipping the IPv6 half: %v", err)
		return
	}
	defer v6.Close()
	exchange(t, v6, d, netip.AddrPortFrom(netip.IPv6Loopback(), port), v6.LocalAddr())
	exchange(t, d, v6, v6.LocalAddr(), netip.AddrPortFrom(netip.IPv6Loopback(), port))
}

func TestSendErrors(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	one := [][]byte{{1}}
	if err := a.Send(one, netip.MustParseAddrPort("[::1]:9")); err != errFamily {
		t.Errorf("IPv6 destination on IPv4 socket: %v", err)
	}
	if err := a.Send(one, netip.AddrPort{}); err != errBadAddr {
		t.Errorf("zero destination: %v", err)
	}
	if err := a.Send(nil, netip.AddrPort{}); err != nil {
		t.Errorf("empty Send: %v", err)
	}
	if _, err := a.Receive(nil, nil, nil); err != errNoBuffer {
		t.Errorf("Receive without buffers: %v", err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := a.Send(one, netip.MustParseAddrPort("127.0.0.1:9")); err != ErrClosed {
		t.Errorf("Send after Close: %v", err)
	}
	bt := newBatch(1, 16)
	if _, err := a.Receive(bt.bufs, bt.sizes, bt.eps); err != ErrClosed {
		t.Errorf("Receive after Close: %v", err)
	}
}

func TestOptions(t *testing.T) {
	if _, err := Listen(netip.MustParseAddrPort("127.0.0.1:0"), Options{BatchSize: -1}); err == nil {
		t.Error("negative BatchSize accepted")
	}
	if _, err := Listen(netip.AddrPort{}, Options{}); err == nil {
		t.Error("invalid address accepted")
	}
	big := listen(t, "127.0.0.1:0", Options{BatchSize: 5000, RecvBuffer: 1 << 20, SendBuffer: -1})
	if big.BatchSize() != maxBatch {
		t.Errorf("BatchSize 5000 gave %d", big.BatchSize())
	}
	var rcv int
	var gerr error
	if err := big.raw.Control(func(fd uintptr) {
		rcv, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUF)
	}); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	// The kernel doubles the value it is given; without CAP_NET_ADMIN it
	// may also cap it at net.core.rmem_max.
	if rcv < 1<<20 && unix.Geteuid() == 0 {
		t.Errorf("SO_RCVBUF = %d, want >= 1 MiB", rcv)
	}
	// A v4-mapped listen address gives an IPv4 socket.
	m := listen(t, "[::ffff:127.0.0.1]:0", Options{})
	if m.v6 || !m.LocalAddr().Addr().Is4() {
		t.Errorf("v4-mapped listen: v6=%v local %v", m.v6, m.LocalAddr())
	}
}

func TestTruncation(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	watchdog(t, b)
	if err := a.Send([][]byte{make([]byte, 100)}, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	in := newBatch(1, 10)
	if err := receiveN(b, in, 1); err != nil {
		t.Fatal(err)
	}
	if in.sizes[0] != 10 {
		t.Errorf("truncated size %d, want 10", in.sizes[0])
	}
}

func TestSteadyStateNoAllocs(t *testing.T) {
	for _, addr := range []string{"127.0.0.1:0", "[::]:0"} {
		a := listen(t, "127.0.0.1:0", Options{})
		b := listen(t, addr, Options{})
		watchdog(t, b)
		dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), b.LocalAddr().Port())
		out := newBatch(64, 1420)
		in := newBatch(64, 2048)
		allocs := testing.AllocsPerRun(50, func() {
			if err := a.Send(out.bufs, dst); err != nil {
				t.Fatal(err)
			}
			if err := receiveN(b, in, len(out.bufs)); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("%s: Send+Receive of 64 allocates %v times", addr, allocs)
		}
	}
}

func TestCloseUnblocksReceive(t *testing.T) {
	defer goleak.VerifyNone(t)
	for _, addr := range []string{"127.0.0.1:0", "[::]:0"} {
		b, err := Listen(netip.MustParseAddrPort(addr), Options{})
		if err != nil {
			t.Fatal(err)
		}
		errc := make(chan error, 1)
		go func() {
			in := newBatch(4, 64)
			_, err := b.Receive(in.bufs, in.sizes, in.eps)
			errc <- err
		}()
		select {
		case err := <-errc:
			t.Fatalf("Receive returned before Close: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
		select {
		case err := <-errc:
			if err != ErrClosed {
				t.Errorf("blocked Receive returned %v, want ErrClosed", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Close did not unblock Receive")
		}
	}
}

func TestConcurrentSends(t *testing.T) {
	defer goleak.VerifyNone(t)
	const senders, rounds, per = 8, 50, 16
	a := listen(t, "127.0.0.1:0", Options{BatchSize: per})
	b := listen(t, "127.0.0.1:0", Options{RecvBuffer: 64 << 20})
	watchdog(t, b)
	dst := b.LocalAddr()

	var wg sync.WaitGroup
	for s := range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out := newBatch(per, 8)
			for r := range rounds {
				for i := range out.bufs {
					binary.BigEndian.PutUint32(out.bufs[i][0:], uint32(s))
					binary.BigEndian.PutUint32(out.bufs[i][4:], uint32(r*per+i))
				}
				if err := a.Send(out.bufs, dst); err != nil {
					t.Errorf("sender %d: %v", s, err)
					return
				}
			}
		}()
	}

	seen := make([][]bool, senders)
	for s := range seen {
		seen[s] = make([]bool, rounds*per)
	}
	in := newBatch(b.BatchSize(), 64)
	for got := 0; got < senders*rounds*per; {
		n, err := b.Receive(in.bufs, in.sizes, in.eps)
		if err != nil {
			t.Fatalf("after %d datagrams: %v", got, err)
		}
		for i := range n {
			d := in.bufs[i][:in.sizes[i]]
			if len(d) != 8 || in.eps[i] != a.LocalAddr() {
				t.Fatalf("bad datagram %x from %v", d, in.eps[i])
			}
			s, seq := binary.BigEndian.Uint32(d), binary.BigEndian.Uint32(d[4:])
			if s >= senders || seq >= rounds*per || seen[s][seq] {
				t.Fatalf("unexpected or duplicate datagram %d/%d", s, seq)
			}
			seen[s][seq] = true
		}
		got += n
	}
	wg.Wait()
}

// BenchmarkLoopbackSendReceive sends batches of 1420-byte datagrams over
// loopback and receives them, with offloads (GSO on send, GRO on receive)
// on both ends, on neither, or on one. On loopback a segmented run reaches
// a GRO socket without ever being cut apart, so offload=on shows the best
// case; through a NIC the segmentation still happens, in hardware or just
// before the driver. gro-only is the cost of GRO's extra copy when nothing
// arrives coalesced.
func BenchmarkLoopbackSendReceive(b *testing.B) {
	on, off := Options{}, Options{DisableOffload: true}
	for _, c := range []struct {
		name    string
		tx, rx  Options
		batches []int
	}{
		{"offload=on", on, on, []int{1, 64}},
		{"offload=off", off, off, []int{1, 64}},
		{"offload=gso-only", on, off, []int{64}},
		{"offload=gro-only", off, on, []int{64}},
	} {
		b.Run(c.name, func(b *testing.B) {
			for _, n := range c.batches {
				b.Run("batch="+strconv.Itoa(n), func(b *testing.B) {
					tx := listen(b, "127.0.0.1:0", c.tx)
					rx := listen(b, "127.0.0.1:0", c.rx)
					if tx.GSO() == c.tx.DisableOffload || rx.GRO() == c.rx.DisableOffload {
						b.Skip("kernel lacks UDP offloads")
					}
					out := newBatch(n, 1420)
					in := newBatch(n, 2048)
					dst := rx.LocalAddr()
					b.SetBytes(int64(1420 * n))
					b.ReportAllocs()
					for b.Loop() {
						if err := tx.Send(out.bufs, dst); err != nil {
							b.Fatal(err)
						}
						if err := receiveN(rx, in, n); err != nil {
							b.Fatal(err)
						}
					}
				})
			}
		})
	}
}
