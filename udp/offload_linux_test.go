//go:build linux

package udp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"slices"
	"strings"

	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

var noOffload = Options{DisableOffload: true}

// needOffloads skips the test on kernels without UDP GSO/GRO.
func needOffloads(t *testing.T, b *LinuxBind) {
	t.Helper()
	if !b.GSO() || !b.GRO() {
		t.Skipf("kernel lacks UDP offloads: GSO %v, GRO %v", b.GSO(), b.GRO())
	}
}

// numbered returns n datagrams of size bytes (the last lastSize), each
// filled with a pattern derived from its index.
func numbered(n, size, lastSize int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		l := size
		if i == n-1 {
			l = lastSize
		}
		out[i] = make([]byte, l)
		for j := range out[i] {
			out[i][j] = byte(i*7 + j)
		}
		if l >= 4 {
			binary.BigEndian.PutUint32(out[i], uint32(i))
		}
	}
	return out
}

// expect checks that in holds out, in order, from src.
func expect(t *testing.T, in *batch, out [][]byte, src netip.AddrPort) {
	t.Helper()
	for i := range out {
		if got := in.bufs[i][:in.sizes[i]]; !bytes.Equal(got, out[i]) {
			t.Fatalf("datagram %d: %d bytes %x..., want %d bytes %x...", i,
				len(got), got[:min(8, len(got))], len(out[i]), out[i][:min(8, len(out[i]))])
		}
		if in.eps[i] != src {
			t.Fatalf("datagram %d from %v, want %v", i, in.eps[i], src)
		}
	}
}

func TestOffloadProbe(t *testing.T) {
	on := listen(t, "127.0.0.1:0", Options{})
	off := listen(t, "127.0.0.1:0", noOffload)
	t.Logf("offloads: GSO %v, GRO %v", on.GSO(), on.GRO())
	if off.GSO() || off.GRO() || off.groRecv != nil || off.recv == nil {
		t.Errorf("DisableOffload: GSO %v, GRO %v", off.GSO(), off.GRO())
	}
	if on.GRO() != (on.groRecv != nil) {
		t.Errorf("GRO %v but groRecv %v", on.GRO(), on.groRecv != nil)
	}
	var gro int
	var gerr error
	if err := on.raw.Control(func(fd uintptr) {
		gro, gerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_UDP, unix.UDP_GRO)
	}); err != nil {
		t.Fatal(err)
	}
	if on.GRO() && (gerr != nil || gro != 1) {
		t.Errorf("UDP_GRO reads back %d, %v", gro, gerr)
	}
}

// TestGSOSendToPlainReceiver sends 64 equal datagrams through GSO to a
// receiver without GRO, which must see 64 separate datagrams.
func TestGSOSendToPlainReceiver(t *testing.T) {
	for _, fam := range []string{"127.0.0.1:0", "[::1]:0"} {
		t.Run(fam, func(t *testing.T) {
			var a, b *LinuxBind
			if strings.HasPrefix(fam, "[") {
				a, b = listen6(t, Options{}), listen6(t, noOffload)
			} else {
				a, b = listen(t, fam, Options{}), listen(t, fam, noOffload)
			}
			needOffloads(t, a)
			watchdog(t, b)
			out := numbered(64, 1420, 1420)
			if err := a.Send(out, b.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			if !a.GSO() {
				t.Fatal("GSO switched itself off")
			}
			in := newBatch(64, 2048)
			if err := receiveN(b, in, 64); err != nil {
				t.Fatal(err)
			}
			expect(t, in, out, a.LocalAddr())
		})
	}
}

// TestGROReceive sends equal datagrams to a GRO receiver, from a GSO
// sender (loopback passes the run through unsegmented, so it arrives
// coalesced) and from a plain one, and checks each datagram and the order.
func TestGROReceive(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
	}{{"from-gso", Options{}}, {"from-plain", noOffload}} {
		t.Run(tc.name, func(t *testing.T) {
			a := listen(t, "127.0.0.1:0", tc.opts)
			b := listen(t, "[::]:0", Options{RecvBuffer: 16 << 20})
			needOffloads(t, b)
			watchdog(t, b)
			dst := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), b.LocalAddr().Port())
			const rounds = 8
			out := numbered(64, 1000, 321)
			in := newBatch(64, 1500)
			for range rounds {
				if err := a.Send(out, dst); err != nil {
					t.Fatal(err)
				}
			}
			for r := range rounds {
				if err := receiveN(b, in, 64); err != nil {
					t.Fatal(err)
				}
				if t.Failed() {
					return
				}
				expect(t, in, out, a.LocalAddr())
				_ = r
			}
			t.Logf("%d coalesced messages", b.groRecv.coalesced)
			if a.GSO() && b.groRecv.coalesced == 0 {
				t.Error("a GSO sender's runs did not arrive coalesced")
			}
			if b.groRecv.pending() {
				t.Error("datagrams left over")
			}
		})
	}
}

// TestGRORemainder receives coalesced runs three datagrams at a time: what
// does not fit must wait for the next Receive, nothing may be lost.
func TestGRORemainder(t *testing.T) {
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{})
	needOffloads(t, b)
	watchdog(t, b)
	out := numbered(64, 1200, 1200)
	more := numbered(5, 77, 10)
	if err := a.Send(out, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	all := newBatch(64, 1500)
	three := newBatch(3, 1500)
	calls := 0
	for got := 0; got < 64; {
		n, err := b.Receive(three.bufs, three.sizes, three.eps)
		if err != nil {
			t.Fatal(err)
		}
		if n < 1 || n > 3 {
			t.Fatalf("Receive into 3 buffers returned %d", n)
		}
		for i := range n {
			copy(all.bufs[got+i], three.bufs[i][:three.sizes[i]])
			all.sizes[got+i], all.eps[got+i] = three.sizes[i], three.eps[i]
		}
		got += n
		calls++
	}
	expect(t, all, out, a.LocalAddr())
	if calls != 22 {
		t.Logf("%d calls (22 if every call but the last was full)", calls)
	}
	if b.groRecv.coalesced == 0 {
		t.Error("nothing arrived coalesced: the remainder path was not exercised")
	}
	// Once drained, the bind waits for new datagrams again.
	if err := a.Send(more, b.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	in := newBatch(5, 1500)
	if err := receiveN(b, in, 5); err != nil {
		t.Fatal(err)
	}
	expect(t, in, more, a.LocalAddr())
}

// TestOffloadMixedSizes sends batches mixing runs of equal sizes, shorter
// tails, longer datagrams, empty datagrams and runs longer than 64 or 64
// KiB, in every combination of offloads on the two ends.
func TestOffloadMixedSizes(t *testing.T) {
	var out [][]byte
	add := func(n, size int) {
		for range n {
			d := make([]byte, size)
			for j := range d {
				d[j] = byte(len(out) + j*3)
			}
			if size >= 2 {
				binary.BigEndian.PutUint16(d, uint16(len(out)))
			}
			out = append(out, d)
		}
	}
	add(10, 1000)
	add(1, 500) // short tail ends a run
	add(5, 1000)
	add(3, 1400) // longer: new run
	add(1, 0)    // empty
	add(2, 1400)
	add(70, 8) // more than 64 segments
	add(50, 1400)
	add(1, 1399)
	add(1, 9000)  // alone
	add(30, 2500) // more than 65507 bytes in total
	add(1, 1)
	for _, tc := range []struct {
		name   string
		tx, rx Options
	}{
		{"gso-gro", Options{}, Options{}},
		{"gso-plain", Options{}, noOffload},
		{"plain-gro", noOffload, Options{}},
		{"plain-plain", noOffload, noOffload},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.tx.BatchSize, tc.rx.BatchSize = 256, 256
			tc.rx.RecvBuffer = 16 << 20
			a := listen(t, "127.0.0.1:0", tc.tx)
			b := listen(t, "127.0.0.1:0", tc.rx)
			watchdog(t, b)
			if err := a.Send(out, b.LocalAddr()); err != nil {
				t.Fatal(err)
			}
			in := newBatch(len(out), 9000)
			if err := receiveN(b, in, len(out)); err != nil {
				t.Fatal(err)
			}
			expect(t, in, out, a.LocalAddr())
			if a.GSO() == tc.tx.DisableOffload && a.GSO() {
				t.Error("GSO on despite DisableOffload")
			}
		})
	}
}

// TestGSOGrouping checks how Send lays out messages.
func TestGSOGrouping(t *testing.T) {
	sizes := func(ls ...int) [][]byte {
		out := make([][]byte, len(ls))
		for i, l := range ls {
			out[i] = make([]byte, l)
		}
		return out
	}
	rep := func(n, l int) []int {
		r := make([]int, n)
		for i := range r {
			r[i] = l
		}
		return r
	}
	cases := []struct {
		name  string
		bufs  [][]byte
		want  []int // datagrams per message
		segOf []int // segment size per message (0: plain)
	}{
		{"equal", sizes(rep(64, 1420)...), []int{46, 18}, []int{1420, 1420}},
		{"tail", sizes(100, 100, 50, 100), []int{3, 1}, []int{100, 0}},
		{"longer", sizes(100, 200, 200, 200), []int{1, 3}, []int{0, 200}},
		{"empty", sizes(10, 0, 10, 10), []int{1, 1, 2}, []int{0, 0, 10}},
		{"max-segments", sizes(rep(130, 8)...), []int{64, 64, 2}, []int{8, 8, 8}},
		{"single", sizes(1400), []int{1}, []int{0}},
		{"huge", sizes(40000, 40000), []int{1, 1}, []int{0, 0}},
	}
	on := gsoShared(time.Now)
	for _, c := range cases {
		s := newSendState(len(c.bufs), on)
		s.prepare(c.bufs, unix.SizeofSockaddrInet4, nil)
		var got, segs []int
		for m := range s.n {
			h := &s.hdrs[m].Hdr
			got = append(got, int(h.Iovlen))
			seg := 0
			if h.Controllen != 0 {
				seg = int((*segmentCmsg)(unsafe.Pointer(h.Control)).size)
			}
			segs = append(segs, seg)
			if h.Iov != &s.iovs[s.first[m]] || h.Namelen != unix.SizeofSockaddrInet4 {
				t.Errorf("%s: message %d points at the wrong datagram or name", c.name, m)
			}
		}
		if !slices.Equal(got, c.want) || !slices.Equal(segs, c.segOf) {
			t.Errorf("%s: messages %v segments %v, want %v %v", c.name, got, segs, c.want, c.segOf)
		}
		// Without GSO: one message per datagram.
		on.gso.on.Store(false)
		s.prepare(c.bufs, 0, nil)
		if s.n != len(c.bufs) {
			t.Errorf("%s: %d plain messages for %d datagrams", c.name, s.n, len(c.bufs))
		}
		on.gso.on.Store(true)
		s.release()
	}
	if off, want := unsafe.Offsetof(segmentCmsg{}.size), uintptr(unix.CmsgLen(0)); off != want {
		t.Errorf("segment size at offset %d, CMSG_DATA at %d", off, want)
	}
	if unsafe.Sizeof(segmentCmsg{}) < uintptr(unix.CmsgSpace(2)) {
		t.Error("segmentCmsg shorter than CMSG_SPACE(2)")
	}
}

func TestGROSegmentParse(t *testing.T) {
	msg := func(level, typ int32, data []byte) []byte {
		b := make([]byte, unix.CmsgSpace(len(data)))
		h := (*unix.Cmsghdr)(unsafe.Pointer(&b[0]))
		h.Level, h.Type = level, typ
		h.SetLen(unix.CmsgLen(len(data)))
		copy(b[unix.CmsgLen(0):], data)
		return b
	}
	seg := binary.NativeEndian.AppendUint32(nil, 1420)
	buf := make([]byte, 0, 256) // 8-byte aligned backing store
	cases := []struct {
		name string
		ctrl []byte
		want int
	}{
		{"none", nil, 0},
		{"gro", msg(unix.SOL_UDP, unix.UDP_GRO, seg), 1420},
		{"after-other", append(msg(unix.SOL_SOCKET, unix.SO_TIMESTAMP, make([]byte, 16)), msg(unix.SOL_UDP, unix.UDP_GRO, seg)...), 1420},
		{"other-only", msg(unix.SOL_IP, unix.IP_TOS, []byte{1}), 0},
		{"short-data", msg(unix.SOL_UDP, unix.UDP_GRO, []byte{1, 2}), 0},
		{"truncated", msg(unix.SOL_UDP, unix.UDP_GRO, seg)[:unix.CmsgLen(0)+2], 0},
		{"garbage-len", []byte{0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, 0},
	}
	for _, c := range cases {
		ctrl := append(buf[:0], c.ctrl...)
		if got := groSegment(ctrl); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// TestGSOFallback makes the kernel refuse segmentation: in a namespace
// whose loopback MTU (1280) is below the datagram size, a segmented send
// fails (EMSGSIZE; EINVAL on older kernels) where a plain one is
// fragmented. Send must deliver every datagram anyway and cap segments
// below what the path takes, without switching GSO off.
func TestGSOFallback(t *testing.T) {
	lowMTULoopback(t)
	a := listen(t, "127.0.0.1:0", Options{})
	b := listen(t, "127.0.0.1:0", Options{RecvBuffer: 16 << 20})
	if !a.GSO() {
		t.Skip("no GSO to fall back from")
	}
	watchdog(t, b)
	// An error about the destination, not about segmentation, fails the
	// Send but leaves GSO on.
	err := a.Send(numbered(20, 1000, 1000), netip.MustParseAddrPort("10.1.2.3:9"))
	if !errors.Is(err, unix.ENETUNREACH) {
		t.Errorf("Send to an unroutable address: %v, want ENETUNREACH", err)
	}
	if !a.GSO() {
		t.Fatal("ENETUNREACH switched GSO off")
	}
	out := numbered(20, 1400, 1400)
	in := newBatch(20, 2048)
	for round := range 2 {
		if err := a.Send(out, b.LocalAddr()); err != nil {
			t.Fatalf("Send %d: %v", round, err)
		}
		if !a.GSO() {
			t.Fatal("a segment the path refused switched GSO off")
		}
		if c := a.tx.gso.limit.Load(); c == nil || c.maxSeg != 1280-28 {
			t.Fatalf("segment cap %+v after the refusal, want the path's 1252", c)
		}
		if err := receiveN(b, in, 20); err != nil {
			t.Fatalf("Receive %d: %v", round, err)
		}
		expect(t, in, out, a.LocalAddr())
	}
}

// lowMTULoopback moves the test goroutine's thread into a network
// namespace of its own (ownNetns) whose loopback MTU (1280) is below
// 1400-byte datagrams, so the kernel refuses to segment them.
func lowMTULoopback(t *testing.T) {
	t.Helper()
	ownNetns(t, []string{"link", "set", "lo", "mtu", "1280"})
}

func TestOffloadSteadyStateNoAllocs(t *testing.T) {
	for _, tc := range []struct {
		name   string
		tx, rx Options
		rxBufs int
	}{
		{"gso-gro", Options{}, Options{}, 64},
		{"gso-gro-remainder", Options{}, Options{}, 3},
		{"plain", noOffload, noOffload, 64},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := listen(t, "127.0.0.1:0", tc.tx)
			b := listen(t, "127.0.0.1:0", tc.rx)
			watchdog(t, b)
			out := newBatch(64, 1420)
			in := newBatch(64, 2048)
			allocs := testing.AllocsPerRun(50, func() {
				if err := a.Send(out.bufs, b.LocalAddr()); err != nil {
					t.Fatal(err)
				}
				for got := 0; got < 64; {
					end := min(got+tc.rxBufs, 64)
					n, err := b.Receive(in.bufs[got:end], in.sizes[got:end], in.eps[got:end])
					if err != nil {
						t.Fatal(err)
					}
					got += n
				}
			})
			if allocs != 0 {
				t.Errorf("Send+Receive of 64 allocates %v times", allocs)
			}
		})
	}
}
