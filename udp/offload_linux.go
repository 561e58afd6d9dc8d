//go:build linux

package udp

import (
	"net/netip"
	"unsafe"

	"golang.org/x/sys/unix"
)

// UDP segmentation (GSO, UDP_SEGMENT, Linux 4.18) and receive coalescing
// (GRO, UDP_GRO, Linux 5.0).
//
// Send: a run of datagrams of one size (the last may be shorter) goes to
// the kernel as one message whose iovecs are the datagrams, with a
// UDP_SEGMENT control message carrying the size. The stack then runs once
// per run; the datagrams are cut apart by the NIC, by the kernel just
// before the driver, or, on loopback and towards a UDP_GRO socket, not at
// all. What happens when the kernel refuses a segmented message is in
// gsogate_linux.go.
//
// Receive: with UDP_GRO the kernel may hand over a run of datagrams of one
// flow as one message of up to 64 KiB, with the segment size in a UDP_GRO
// control message. Such a message does not fit the caller's buffers, so a
// GRO bind receives into its own 64 KiB buffers (groState) and copies the
// datagrams out, one per caller buffer, keeping what does not fit for the
// next Receive.

const (
	// maxGSOSegments is the most datagrams per segmented message. The kernel
	// allows 64 (UDP_MAX_SEGMENTS; 128 from Linux 6.9).
	maxGSOSegments = 64
	// maxGSOBytes is the most payload per segmented message: a UDP datagram
	// over IPv4 holds at most 65535-20-8 bytes.
	maxGSOBytes = 65507
	// groBufSize is the size of each GRO receive buffer: the largest UDP
	// payload (IPv6 allows 65527) rounded up.
	groBufSize = 1 << 16
	// maxGROBuffers caps the GRO receive buffers per bind (4 MiB).
	maxGROBuffers = 64
	// groCmsgSize is the control buffer per received message.
	groCmsgSize = 64
)

// probeOffloads enables UDP_GRO on fd (if wantGRO) and checks that the kernel knows
// UDP_SEGMENT. Either may be missing on old kernels (ENOPROTOOPT).
func probeOffloads(fd int, wantGRO bool) (gso, gro bool) {
	_, err := unix.GetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_SEGMENT)
	gso = err == nil
	gro = wantGRO && unix.SetsockoptInt(fd, unix.IPPROTO_UDP, unix.UDP_GRO, 1) == nil
	return gso, gro
}

// segmentCmsg is a UDP_SEGMENT control message: a cmsghdr followed by the
// segment size (uint16), padded to CMSG_SPACE(2).
type segmentCmsg struct {
	hdr  unix.Cmsghdr
	size uint16
	_    [6]byte
}

func (c *segmentCmsg) init() {
	c.hdr.Level = unix.SOL_UDP
	c.hdr.Type = unix.UDP_SEGMENT
	c.hdr.SetLen(unix.CmsgLen(2))
}

// build lays out the messages for datagrams s.bufs[d:], starting at message
// m, and returns the total number of messages. Each run of datagrams of
// equal length (the last may be shorter) at most s.maxSeg long, one lane
// byte (laneKey) and, for SendMany, one destination, up to
// maxGSOSegments datagrams and maxGSOBytes bytes, becomes one segmented
// message; empty datagrams, runs of one and datagrams before plainTo
// (gsoFailed's resend) are plain messages. A SendMany message goes to
// its first datagram's destination (names[d]), a Send message to name.
func (s *sendState) build(m, d, plainTo int) int {
	for d < len(s.bufs) {
		size := len(s.bufs[d])
		end := d + 1
		if d >= plainTo && size > 0 && size <= s.maxSeg {
			for total := size; end < len(s.bufs) && end-d < maxGSOSegments; {
				l := len(s.bufs[end])
				if l == 0 || l > size || total+l > maxGSOBytes || laneKey(s.bufs[end]) != laneKey(s.bufs[d]) ||
					(s.eps != nil && s.eps[end] != s.eps[d]) {
					break
				}
				total += l
				end++
				if l < size {
					break
				}
			}
		}
		h := &s.hdrs[m].Hdr
		h.Iov = &s.iovs[d]
		h.SetIovlen(end - d)
		if s.eps != nil {
			h.Name = (*byte)(unsafe.Pointer(&s.names[d]))
			h.Namelen = s.nlens[d]
		} else {
			h.Namelen = s.nlen
		}
		if end-d > 1 {
			s.cmsgs[m].size = uint16(size)
			h.Control = (*byte)(unsafe.Pointer(&s.cmsgs[m]))
			h.SetControllen(unix.CmsgSpace(2))
		} else {
			h.Control = nil
			h.SetControllen(0)
		}
		s.first[m] = d
		m++
		d = end
	}
	return m
}

// groState is the receive scratch of a bind with UDP_GRO: recvmmsg into
// 64 KiB buffers, then a cursor that copies the datagrams out across
// Receive calls. It is used by one goroutine at a time.
type groState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr
	ctrls [][groCmsgSize / 8]uint64 // 8-byte aligned control buffers
	arena []byte                    // len(hdrs) buffers of groBufSize

	segs []int            // segment size of each received message
	eps  []netip.AddrPort // source of each received message

	got       int    // messages in the arena
	msg, pos  int    // cursor: next message, byte offset in it
	coalesced uint64 // messages that held more than one datagram

	n   int   // messages offered to the current call
	err error // system call error of the current call
	fn  func(fd uintptr) bool
}

func newGROState(batch int) *groState {
	k := min(batch, maxGROBuffers)
	s := &groState{
		hdrs:  make([]unix.Mmsghdr, k),
		iovs:  make([]unix.Iovec, k),
		names: make([]sockaddr, k),
		ctrls: make([][groCmsgSize / 8]uint64, k),
		arena: make([]byte, k*groBufSize),
		segs:  make([]int, k),
		eps:   make([]netip.AddrPort, k),
	}
	for i := range s.hdrs {
		s.iovs[i].Base = &s.arena[i*groBufSize]
		s.iovs[i].SetLen(groBufSize)
		h := &s.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		h.Iov = &s.iovs[i]
		h.SetIovlen(1)
		h.Control = (*byte)(unsafe.Pointer(&s.ctrls[i]))
	}
	s.fn = s.recv
	return s
}

// pending reports whether datagrams of the last recvmmsg wait to be
// copied out.
func (s *groState) pending() bool { return s.msg < s.got }

// prepare readies the first n buffers for recvmmsg.
func (s *groState) prepare(n int) {
	n = min(n, len(s.hdrs))
	for i := range n {
		h := &s.hdrs[i].Hdr
		h.Namelen = unix.SizeofSockaddrInet6
		h.SetControllen(groCmsgSize)
		h.Flags = 0
	}
	s.n, s.got, s.msg, s.pos, s.err = n, 0, 0, 0, nil
}

// recv is the RawConn.Read callback, as recvState.recv.
func (s *groState) recv(fd uintptr) bool {
	return recvmmsg(fd, s.hdrs, s.n, &s.got, &s.err)
}

// parse records each received message's source and segment size.
func (s *groState) parse() {
	for i := range s.got {
		h := &s.hdrs[i]
		size := int(h.Len)
		seg := groSegment(unsafe.Slice((*byte)(unsafe.Pointer(&s.ctrls[i])), int(h.Hdr.Controllen)))
		if seg <= 0 || seg >= size {
			seg = size
		} else {
			s.coalesced++
		}
		s.segs[i] = seg
		s.eps[i] = decodeSockaddr(&s.names[i])
	}
}

// split copies pending datagrams into bufs, one each, and returns how many.
// A datagram longer than its buffer is truncated, as recvmmsg would.
func (s *groState) split(bufs [][]byte, sizes []int, eps []netip.AddrPort) int {
	j := 0
	for ; j < len(bufs) && s.msg < s.got; j++ {
		size, seg := int(s.hdrs[s.msg].Len), s.segs[s.msg]
		base := s.msg * groBufSize
		end := min(s.pos+seg, size)
		sizes[j] = copy(bufs[j], s.arena[base+s.pos:base+end])
		eps[j] = s.eps[s.msg]
		s.pos = end
		if s.pos >= size {
			s.msg++
			s.pos = 0
		}
	}
	return j
}

// groSegment returns the segment size in a UDP_GRO control message in
// ctrl, or 0 if there is none. It allocates nothing.
func groSegment(ctrl []byte) int {
	hlen := unix.CmsgLen(0)
	for len(ctrl) >= hlen {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&ctrl[0]))
		l := int(h.Len)
		if l < hlen || l > len(ctrl) {
			return 0
		}
		if h.Level == unix.SOL_UDP && h.Type == unix.UDP_GRO && l >= unix.CmsgLen(4) {
			return int(*(*int32)(unsafe.Pointer(&ctrl[hlen])))
		}
		next := unix.CmsgSpace(l - hlen)
		if next >= len(ctrl) {
			return 0
		}
		ctrl = ctrl[next:]
	}
	return 0
}

// laneKey is what a receiver's ListenLanes steers a datagram by: a
// transport message's lane byte, else 0. A segmented message reaches the
// receiver whole where nothing segments it on the way (loopback, veth):
// its kernel then steers all of it by its first datagram, so one message
// never carries two lane bytes.
func laneKey(b []byte) byte {
	if len(b) >= 2 && b[0] == msgTransport {
		return b[1]
	}
	return 0
}
