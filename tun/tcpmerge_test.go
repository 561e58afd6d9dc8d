package tun

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"slices"
	"testing"

	"github.com/bridgehead/bridgehead/packet"
)

// seg describes one TCP segment for tcpSeg.
type seg struct {
	v6         bool
	sport      uint16
	seq, ack   uint32
	flags      byte
	payload    int
	ttl        byte       // 0: 64
	noDF       bool       // IPv4 without DF
	ipOptions  bool       // IPv4 header of 24 bytes
	tsval      uint32     // TCP timestamp option value (header of 32 bytes)
	window     uint16     // 0: 500
	fragOffset uint16     // IPv4 fragment offset (8-byte units)
	src, dst   netip.Addr // zero: 10.1.0.1 and 10.2.0.1 (fd00::1 and fd00::2)
	dport      uint16     // 0: 80
	bare       bool       // a 20-byte TCP header, no options
}

// tcpSeg builds the segment s, by default from 10.1.0.1 (fd00::1) to
// 10.2.0.1 (fd00::2), port s.sport to 80, with valid checksums, at offset in a buffer of
// capacity offset+OffloadWriteBufferSize. Payload byte j is byte(seq+j).
func tcpSeg(s seg, offset int) []byte {
	ipLen := 20
	if s.v6 {
		ipLen = 40
	} else if s.ipOptions {
		ipLen = 24
	}
	tcpLen := 32
	if s.bare {
		tcpLen = 20
	}
	n := ipLen + tcpLen + s.payload
	b := make([]byte, offset+n, offset+OffloadWriteBufferSize)
	p := b[offset:]
	var src, dst netip.Addr
	if s.v6 {
		src, dst = netip.MustParseAddr("fd00::1"), netip.MustParseAddr("fd00::2")
		if s.src.IsValid() {
			src, dst = s.src, s.dst
		}
		p[0] = 0x60
		binary.BigEndian.PutUint16(p[4:], uint16(n-40))
		p[6] = 6
		p[7] = 64
		if s.ttl != 0 {
			p[7] = s.ttl
		}
		s16, d16 := src.As16(), dst.As16()
		copy(p[8:], s16[:])
		copy(p[24:], d16[:])
	} else {
		src, dst = netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
		if s.src.IsValid() {
			src, dst = s.src, s.dst
		}
		p[0] = 0x40 | byte(ipLen/4)
		binary.BigEndian.PutUint16(p[2:], uint16(n))
		binary.BigEndian.PutUint16(p[4:], uint16(s.seq))
		if !s.noDF {
			p[6] = 0x40
		}
		binary.BigEndian.PutUint16(p[6:], binary.BigEndian.Uint16(p[6:])|s.fragOffset)
		p[8] = 64
		if s.ttl != 0 {
			p[8] = s.ttl
		}
		p[9] = 6
		s4, d4 := src.As4(), dst.As4()
		copy(p[12:], s4[:])
		copy(p[16:], d4[:])
		if s.ipOptions {
			p[20] = 1 // NOP options
			p[21], p[22], p[23] = 1, 1, 0
		}
		binary.BigEndian.PutUint16(p[10:], packet.Checksum(p[:ipLen], 0))
	}
	t := p[ipLen:]
	binary.BigEndian.PutUint16(t[0:], s.sport)
	dport := s.dport
	if dport == 0 {
		dport = 80
	}
	binary.BigEndian.PutUint16(t[2:], dport)
	binary.BigEndian.PutUint32(t[4:], s.seq)
	binary.BigEndian.PutUint32(t[8:], s.ack)
	t[12] = byte(tcpLen/4) << 4
	t[13] = s.flags
	w := s.window
	if w == 0 {
		w = 500
	}
	binary.BigEndian.PutUint16(t[14:], w)
	if !s.bare {
		t[20], t[21], t[22], t[23] = 1, 1, 8, 10 // NOP NOP timestamps
		binary.BigEndian.PutUint32(t[24:], s.tsval)
	}
	for j := range s.payload {
		t[tcpLen+j] = byte(s.seq + uint32(j))
	}
	binary.BigEndian.PutUint16(t[16:], packet.Checksum(t[:tcpLen+s.payload], packet.PseudoHeaderSum(src, dst, 6, tcpLen+s.payload)))
	return b
}

// segs returns n contiguous full segments of size each, starting at seq,
// with the flags ACK.
func segs(n, size int, seq uint32, v6 bool) []seg {
	out := make([]seg, n)
	for i := range out {
		out[i] = seg{v6: v6, sport: 1000, seq: seq + uint32(i*size), ack: 7, flags: tcpFlagACK, payload: size}
	}
	return out
}

// planOf runs the merger over packets built from ss and returns it with
// the buffers.
func planOf(t testing.TB, ss []seg) (*tcpMerger, [][]byte) {
	const offset = 16
	bufs := make([][]byte, len(ss))
	for i, s := range ss {
		bufs[i] = tcpSeg(s, offset)
	}
	m := newTCPMerger(len(bufs))
	m.reset()
	for i, b := range bufs {
		ipLen, tcpLen, v6, ok := tcpHeaders(b[offset:])
		if !ok {
			t.Fatalf("packet %d not taken as TCP", i)
		}
		m.add(bufs, i, offset, ipLen, tcpLen, v6)
	}
	return m, bufs
}

// runSizes returns the segment count of every run.
func runSizes(m *tcpMerger) []int {
	var out []int
	for _, r := range m.runs {
		out = append(out, r.segs)
	}
	return out
}

func TestTCPMergePlan(t *testing.T) {
	with := func(ss []seg, i int, f func(*seg)) []seg {
		f(&ss[i])
		return ss
	}
	twoFlows := append(segs(2, 1000, 1, false), segs(2, 1000, 50000, false)...)
	for i := range 2 {
		twoFlows[2+i].sport = 2000
	}
	twoFlows[1], twoFlows[2] = twoFlows[2], twoFlows[1] // a, b, a, b
	for _, tc := range []struct {
		name string
		segs []seg
		want []int
	}{
		{"five contiguous", segs(5, 1000, 1, false), []int{5}},
		{"IPv6", segs(4, 1000, 1, true), []int{4}},
		{"a short one closes the run", append(with(segs(4, 1000, 1, false), 3, func(s *seg) { s.payload = 500 }), seg{sport: 1000, seq: 3501, ack: 7, flags: tcpFlagACK, payload: 1000}), []int{4, 1}},
		{"PSH closes the run", with(segs(5, 1000, 1, false), 2, func(s *seg) { s.flags |= tcpFlagPSH }), []int{3, 2}},
		{"sequence gap", with(segs(4, 1000, 1, false), 2, func(s *seg) { s.seq += 1000 }), []int{2, 1, 1}},
		{"another ack", with(segs(4, 1000, 1, false), 2, func(s *seg) { s.ack = 8 }), []int{2, 1, 1}},
		{"another window", with(segs(4, 1000, 1, false), 1, func(s *seg) { s.window = 501 }), []int{1, 1, 2}},
		{"another timestamp", with(segs(4, 1000, 1, false), 2, func(s *seg) { s.tsval = 9 }), []int{2, 1, 1}},
		{"another TTL", with(segs(3, 1000, 1, false), 1, func(s *seg) { s.ttl = 63 }), []int{1, 1, 1}},
		{"longer than the first", []seg{
			{sport: 1000, seq: 1, ack: 7, flags: tcpFlagACK, payload: 500},
			{sport: 1000, seq: 501, ack: 7, flags: tcpFlagACK, payload: 1000},
			{sport: 1000, seq: 1501, ack: 7, flags: tcpFlagACK, payload: 1000},
		}, []int{1, 2}},
		{"without DF", with(segs(3, 1000, 1, false), 0, func(s *seg) { s.noDF = true }), []int{1, 2}},
		{"IPv4 options", with(segs(3, 1000, 1, false), 0, func(s *seg) { s.ipOptions = true }), []int{1, 2}},
		// A flow whose packets change header length keeps its order.
		{"IPv4 options mid-flow", []seg{
			{sport: 1000, seq: 1, ack: 7, flags: tcpFlagACK, payload: 1000},
			{sport: 1000, seq: 1001, ack: 7, flags: tcpFlagACK, ipOptions: true},
			{sport: 1000, seq: 1001, ack: 7, flags: tcpFlagACK, payload: 1000},
			{sport: 1000, seq: 2001, ack: 7, flags: tcpFlagACK, payload: 1000},
		}, []int{1, 1, 2}},
		{"SYN", with(segs(3, 1000, 1, false), 0, func(s *seg) { s.flags = tcpFlagACK | 0x02 }), []int{1, 2}},
		{"FIN ends it", with(segs(3, 1000, 1, false), 2, func(s *seg) { s.flags |= 0x01 }), []int{2, 1}},
		{"ECE", with(segs(3, 1000, 1, false), 1, func(s *seg) { s.flags |= 0x40 }), []int{1, 1, 1}},
		{"pure ACK", with(segs(3, 1000, 1, false), 0, func(s *seg) { s.payload = 0 }), []int{1, 2}},
		{"two flows interleaved", twoFlows, []int{2, 2}},
		// 50 segments of 1400 bytes: 46 fit in 65535 bytes with 52 bytes of headers.
		{"the IP length limit", segs(50, 1400, 1, false), []int{46, 4}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, _ := planOf(t, tc.segs)
			if got := runSizes(m); !slices.Equal(got, tc.want) {
				t.Errorf("runs %v, want %v", got, tc.want)
			}
		})
	}
}

// TestTCPMergeFinish checks what is handed to the kernel: the virtio-net
// header, the IP length and header checksum, and a partial TCP checksum
// that, completed over the merged bytes as the kernel or a NIC would,
// gives the valid checksum of the merged segment; and that the merged
// payload is the segments' payloads in order.
func TestTCPMergeFinish(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		ss := segs(6, 1300, 4242, v6)
		ss[5].payload = 700
		ss[5].flags |= tcpFlagPSH
		m, bufs := planOf(t, ss)
		if len(m.runs) != 1 {
			t.Fatalf("v6 %v: runs %v", v6, runSizes(m))
		}
		r := &m.runs[0]
		out := r.finish(bufs[r.buf], 16)
		h, p := out[:HeadroomNeeded], out[HeadroomNeeded:]
		ipLen, gsoType := 20, byte(vnetGSOTCPv4)
		if v6 {
			ipLen, gsoType = 40, vnetGSOTCPv6
		}
		wantHdr := make([]byte, HeadroomNeeded)
		wantHdr[0], wantHdr[1] = vnetFlagNeedsCsum, gsoType
		binary.LittleEndian.PutUint16(wantHdr[2:], uint16(ipLen+32))
		binary.LittleEndian.PutUint16(wantHdr[4:], 1300)
		binary.LittleEndian.PutUint16(wantHdr[6:], uint16(ipLen))
		binary.LittleEndian.PutUint16(wantHdr[8:], tcpChecksumAt)
		if !bytes.Equal(h, wantHdr) {
			t.Errorf("v6 %v: virtio-net header %x, want %x", v6, h, wantHdr)
		}
		if want := ipLen + 32 + 5*1300 + 700; len(p) != want {
			t.Fatalf("v6 %v: %d bytes, want %d", v6, len(p), want)
		}
		ihl, _, _, ok := tcpHeaders(p)
		if !ok || ihl != ipLen {
			t.Fatalf("v6 %v: the merged packet does not parse", v6)
		}
		if !v6 && packet.Checksum(p[:20], 0) != 0 {
			t.Errorf("IPv4 header checksum wrong")
		}
		if p[ipLen+13] != tcpFlagACK|tcpFlagPSH {
			t.Errorf("v6 %v: flags %#x, want ACK|PSH", v6, p[ipLen+13])
		}
		// Complete the checksum as the kernel does for CHECKSUM_PARTIAL:
		// sum from csum_start to the end, store the complement.
		seg := bytes.Clone(p[ipLen:])
		binary.BigEndian.PutUint16(seg[tcpChecksumAt:], packet.Checksum(seg, 0))
		var src, dst netip.Addr
		if v6 {
			src, dst = netip.AddrFrom16([16]byte(p[8:24])), netip.AddrFrom16([16]byte(p[24:40]))
		} else {
			src, dst = netip.AddrFrom4([4]byte(p[12:16])), netip.AddrFrom4([4]byte(p[16:20]))
		}
		if packet.Checksum(seg, packet.PseudoHeaderSum(src, dst, 6, len(seg))) != 0 {
			t.Errorf("v6 %v: the completed checksum does not verify", v6)
		}
		// The payload is the segments' payloads in order.
		for j, b := range seg[32:] {
			if b != byte(4242+j) {
				t.Fatalf("v6 %v: payload byte %d is %d", v6, j, b)
			}
		}
	}
}

// TestTCPMergeLone: a packet that merges with nothing keeps its bytes but
// for the checksum field, and goes over as checksum-partial without GSO.
func TestTCPMergeLone(t *testing.T) {
	m, bufs := planOf(t, []seg{{sport: 9, seq: 5, ack: 1, flags: tcpFlagACK | 0x02, payload: 0}})
	before := bytes.Clone(bufs[0][16:])
	r := &m.runs[0]
	out := r.finish(bufs[r.buf], 16)
	if out[0] != vnetFlagNeedsCsum || out[1] != vnetGSONone || binary.LittleEndian.Uint16(out[4:]) != 0 {
		t.Errorf("virtio-net header %x", out[:HeadroomNeeded])
	}
	p := out[HeadroomNeeded:]
	if !bytes.Equal(p[:36], before[:36]) || !bytes.Equal(p[38:], before[38:]) {
		t.Errorf("bytes other than the TCP checksum changed")
	}
}

// TestTCPHeadersRejects: what the merger leaves to the library.
func TestTCPHeadersRejects(t *testing.T) {
	frag := tcpSeg(seg{seq: 1, flags: tcpFlagACK, payload: 10, fragOffset: 0x2000}, 0) // MF
	udp := tcpSeg(seg{seq: 1, flags: tcpFlagACK, payload: 10}, 0)
	udp[9] = 17
	short := tcpSeg(seg{seq: 1, flags: tcpFlagACK, payload: 10}, 0)
	short = short[:30]
	badLen := tcpSeg(seg{seq: 1, flags: tcpFlagACK, payload: 10}, 0)
	badLen[3]++
	badOff := tcpSeg(seg{seq: 1, flags: tcpFlagACK, payload: 10}, 0)
	badOff[20+12] = 0xf0 // a 60-byte TCP header in a 42-byte segment
	ext6 := tcpSeg(seg{v6: true, seq: 1, flags: tcpFlagACK, payload: 10}, 0)
	ext6[6] = 0 // hop-by-hop options first
	for name, p := range map[string][]byte{
		"fragment": frag, "UDP": udp, "short": short, "IP length": badLen,
		"data offset": badOff, "IPv6 extension header": ext6, "empty": nil,
	} {
		if _, _, _, ok := tcpHeaders(p); ok {
			t.Errorf("%s: taken as TCP", name)
		}
	}
}

// TestTCPMergeCapacity: a head buffer without spare capacity merges nothing.
func TestTCPMergeCapacity(t *testing.T) {
	const offset = 16
	ss := segs(3, 1000, 1, false)
	bufs := make([][]byte, len(ss))
	for i, s := range ss {
		b := tcpSeg(s, offset)
		bufs[i] = b[: len(b) : len(b)+500] // room for half a segment
	}
	m := newTCPMerger(3)
	m.reset()
	for i, b := range bufs {
		ipLen, tcpLen, v6, _ := tcpHeaders(b[offset:])
		m.add(bufs, i, offset, ipLen, tcpLen, v6)
	}
	if got := runSizes(m); !slices.Equal(got, []int{1, 1, 1}) {
		t.Errorf("runs %v, want [1 1 1]", got)
	}
}

// TestTCPMergeReuse: a second plan starts from nothing, and planning
// allocates nothing.
func TestTCPMergeReuse(t *testing.T) {
	const offset = 16
	orig, bufs := batchOf(segs(64, 1400, 1, false), offset)
	m := newTCPMerger(len(bufs))
	plan := func() { replan(m, bufs, orig, offset) }
	plan()
	if got := runSizes(m); !slices.Equal(got, []int{46, 18}) {
		t.Fatalf("runs %v", got)
	}
	if a := testing.AllocsPerRun(20, plan); a != 0 {
		t.Errorf("%v allocations per plan", a)
	}
	if got := runSizes(m); !slices.Equal(got, []int{46, 18}) {
		t.Fatalf("runs after reuse %v", got)
	}
}

// FuzzTCPMerge: any batch of bytes is planned without panics, every TCP
// packet ends up in exactly one run, and no run outgrows its buffer or
// the IP limit.
func FuzzTCPMerge(f *testing.F) {
	f.Add(bytes.Join([][]byte{tcpSeg(segs(1, 100, 1, false)[0], 0), tcpSeg(segs(2, 100, 1, false)[1], 0)}, []byte{0xff, 0xfe}))
	f.Add(tcpSeg(segs(1, 100, 1, true)[0], 0))
	f.Fuzz(func(t *testing.T, in []byte) {
		const offset = 16
		var bufs [][]byte
		for _, p := range bytes.Split(in, []byte{0xff, 0xfe}) {
			b := make([]byte, offset+len(p), offset+len(p)+3000)
			copy(b[offset:], p)
			bufs = append(bufs, b)
		}
		m := newTCPMerger(len(bufs))
		m.reset()
		tcp := 0
		for i, b := range bufs {
			if ipLen, tcpLen, v6, ok := tcpHeaders(b[offset:]); ok {
				tcp++
				m.add(bufs, i, offset, ipLen, tcpLen, v6)
			}
		}
		n := 0
		for i := range m.runs {
			r := &m.runs[i]
			n += r.segs
			if r.total > maxIPPacket || offset+r.total > cap(bufs[r.buf]) {
				t.Fatalf("run %d: %d bytes in a buffer of %d", i, r.total, cap(bufs[r.buf]))
			}
			if out := r.finish(bufs[r.buf], offset); len(out) != HeadroomNeeded+r.total {
				t.Fatalf("run %d: finish gave %d bytes", i, len(out))
			}
		}
		if n != tcp {
			t.Fatalf("%d TCP packets, %d in runs", tcp, n)
		}
	})
}

// BenchmarkTCPMerge plans and finishes a batch of 64 segments of one flow
// (the cost per packet of the merge, without the write).
func BenchmarkTCPMerge(b *testing.B) {
	const offset = 16
	orig, bufs := batchOf(segs(64, 1400, 1, false), offset)
	m := newTCPMerger(len(bufs))
	b.SetBytes(int64(len(orig) * 1400))
	b.ReportAllocs()
	for b.Loop() {
		replan(m, bufs, orig, offset)
	}
}

// batchOf builds the segments ss at offset, and empty buffers of the
// same capacities for replan.
func batchOf(ss []seg, offset int) (orig, bufs [][]byte) {
	orig = make([][]byte, len(ss))
	bufs = make([][]byte, len(ss))
	for i, s := range ss {
		orig[i] = tcpSeg(s, offset)
		bufs[i] = make([]byte, 0, cap(orig[i]))
	}
	return orig, bufs
}

// replan copies the packets orig into bufs (of the same capacity, so
// nothing is allocated) and plans and finishes them with m.
func replan(m *tcpMerger, bufs, orig [][]byte, offset int) {
	for i := range bufs {
		bufs[i] = append(bufs[i][:0], orig[i]...)
	}
	m.reset()
	for i, b := range bufs {
		ipLen, tcpLen, v6, _ := tcpHeaders(b[offset:])
		m.add(bufs, i, offset, ipLen, tcpLen, v6)
	}
	for i := range m.runs {
		m.runs[i].finish(bufs[m.runs[i].buf], offset)
	}
}
