//go:build linux

package udp

import (
	"io"
	"net/netip"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// This file holds the recvmmsg/sendmmsg scratch state. Each state owns
// preallocated mmsghdr, iovec and sockaddr arrays that point into each other
// for the state's whole life; a call only points the iovecs at the caller's
// buffers, runs the system call through syscall.RawConn (so EAGAIN parks the
// goroutine in the Go netpoller), and points them away again.
//
// Each state's callback (fn) is a method value made once in newRecvState or
// newSendState: passing it to RawConn.Read/Write allocates nothing, where a
// closure built per call would.
//
// Offloads (UDP_SEGMENT on send, UDP_GRO on receive) live in
// offload_linux.go: sendState groups runs of equal-sized datagrams into
// segmented messages there, and a bind with UDP_GRO receives through a
// groState instead of a recvState.

// recvState is the scratch of one Receive call. It is used by one goroutine
// at a time (LinuxBind serialises Receive).
type recvState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec
	names []sockaddr

	n   int   // messages offered to the current call
	got int   // messages the kernel filled
	err error // system call error of the current call
	fn  func(fd uintptr) bool
}

func newRecvState(batch int) *recvState {
	s := &recvState{
		hdrs:  make([]unix.Mmsghdr, batch),
		iovs:  make([]unix.Iovec, batch),
		names: make([]sockaddr, batch),
	}
	for i := range s.hdrs {
		h := &s.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&s.names[i]))
		h.Iov = &s.iovs[i]
		h.SetIovlen(1)
	}
	s.fn = s.recv
	return s
}

// prepare points message i at bufs[i] for the first n buffers.
func (s *recvState) prepare(bufs [][]byte, n int) {
	for i := range n {
		s.iovs[i].Base = unsafe.SliceData(bufs[i])
		s.iovs[i].SetLen(len(bufs[i]))
		s.hdrs[i].Hdr.Namelen = unix.SizeofSockaddrInet6
		s.hdrs[i].Hdr.Flags = 0
	}
	s.n, s.got, s.err = n, 0, nil
}

// recv is the RawConn.Read callback: it returns false to wait for the socket
// to become readable, true when done (s.got or s.err set).
func (s *recvState) recv(fd uintptr) bool {
	return recvmmsg(fd, s.hdrs, s.n, &s.got, &s.err)
}

// recvmmsg receives up to n messages into hdrs, retrying on EINTR. It
// reports false (wait for readability) on EAGAIN, and true once *got or
// *err is set. It is the body of every RawConn.Read callback here.
func recvmmsg(fd uintptr, hdrs []unix.Mmsghdr, n int, got *int, err *error) bool {
	for {
		r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&hdrs[0])), uintptr(n), 0, 0, 0)
		switch errno {
		case 0:
			*got = int(r)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			*err = os.NewSyscallError("recvmmsg", errno)
			return true
		}
	}
}

// finish copies sizes and sources out and drops the references to the
// caller's buffers. A datagram longer than its buffer arrives truncated
// (MSG_TRUNC); its size is the truncated length.
func (s *recvState) finish(sizes []int, eps []netip.AddrPort) int {
	for i := range s.got {
		sizes[i] = int(s.hdrs[i].Len)
		eps[i] = decodeSockaddr(&s.names[i])
	}
	for i := range s.n {
		s.iovs[i].Base = nil
	}
	return s.got
}

// sendState is the scratch of one Send call. LinuxBind keeps a small pool
// of them so that concurrent Sends do not wait for each other's system
// calls; a state belongs to one Send (or SendMany) call at a time, which
// alone reads and writes its fields. Only sh is shared, with the bind's
// other states (see sendShared).
//
// With GSO, a message carries a run of datagrams (one iovec each) and a
// UDP_SEGMENT control message, so there are fewer messages than datagrams:
// message m starts at datagram first[m].
type sendState struct {
	hdrs  []unix.Mmsghdr
	iovs  []unix.Iovec   // one per datagram
	cmsgs []segmentCmsg  // one per message
	first []int          // first datagram of each message
	name  sockaddr       // destination, shared by every message of the batch
	sh    *sendShared    // the bind's GSO gate and refusal counts; nil: plain messages only, uncounted
	bufs  [][]byte       // datagrams of the current chunk
	nlen  uint32         // length of name for the current chunk
	dst   netip.AddrPort // Send's destination (SendMany's are in eps)

	n      int   // messages in the current chunk
	off    int   // messages of the chunk already sent or refused
	err    error // system call error that ended the chunk (not a refusal)
	maxSeg int   // largest segment for the chunk (gsoGate.maxSegment); 0: no GSO
	fn     func(fd uintptr) bool

	// Refusals of the current chunk (refuse): how many datagrams, the
	// first error, and each datagram's error in errs (the caller's, may
	// be nil).
	failed   int
	firstErr unix.Errno
	errs     []error

	// suspect is the message gsoFailed rebuilt plain after an EMSGSIZE
	// or EINVAL refusal of a segment of suspectSeg bytes (-1: none);
	// capped asks send to rebuild the rest of the chunk under a new cap.
	suspect, suspectSeg int
	capped              bool

	// names and nlens hold one destination per datagram for SendMany,
	// which points each message at its first datagram's and back at
	// name when done; eps (nil for Send, whose destination is dst) tells
	// build where runs to different destinations end.
	names []sockaddr
	nlens []uint32
	eps   []netip.AddrPort
}

// newSendState makes the scratch for chunks of up to batch datagrams. sh
// is the bind's shared send state (nil: plain messages only, refusals
// not counted).
func newSendState(batch int, sh *sendShared) *sendState {
	s := &sendState{
		hdrs:  make([]unix.Mmsghdr, batch),
		iovs:  make([]unix.Iovec, batch),
		cmsgs: make([]segmentCmsg, batch),
		first: make([]int, batch),
		names: make([]sockaddr, batch),
		nlens: make([]uint32, batch),
		sh:    sh,
	}
	for i := range s.hdrs {
		s.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&s.name))
		s.cmsgs[i].init()
	}
	s.fn = s.send
	return s
}

// prepare points the iovecs at bufs and builds the messages, all addressed
// to s.name (namelen bytes of it; s.dst is the destination): segmented
// runs if GSO is on, one message per datagram otherwise. errs, if not
// nil, gets each refused datagram's error.
func (s *sendState) prepare(bufs [][]byte, namelen uint32, errs []error) {
	s.bufs, s.nlen = bufs, namelen
	s.start(errs)
}

// prepareMany builds the messages for bufs[i] to eps[i], whose
// destinations are already encoded in names[i] (nlens[i] bytes of it):
// with GSO, each run of datagrams to one destination (as build groups
// them) is one segmented message, else one message per datagram.
func (s *sendState) prepareMany(bufs [][]byte, eps []netip.AddrPort, errs []error) {
	s.bufs, s.eps = bufs, eps
	s.start(errs)
}

// start points the iovecs at s.bufs and builds the chunk's messages.
func (s *sendState) start(errs []error) {
	for i, b := range s.bufs {
		s.iovs[i].Base = unsafe.SliceData(b)
		s.iovs[i].SetLen(len(b))
	}
	s.maxSeg = 0
	if s.sh != nil {
		s.maxSeg = s.sh.gso.maxSegment()
	}
	s.n = s.build(0, 0, 0)
	s.off, s.err = 0, nil
	s.failed, s.firstErr, s.errs = 0, 0, errs
	s.suspect, s.capped = -1, false
}

// releaseMany undoes prepareMany: the messages go back to the shared name.
func (s *sendState) releaseMany() {
	for i := range s.bufs {
		s.hdrs[i].Hdr.Name = (*byte)(unsafe.Pointer(&s.name))
	}
	s.eps = nil
	s.release()
}

// send is the RawConn.Write callback. It loops over partial sendmmsg
// results and EINTR, returns false on EAGAIN to wait for writability, and
// true when the chunk is done: every message sent or refused (refuse),
// or s.err set. sendmmsg reports a refusal only for the first message it
// was given (it returns the count sent before one), so a refused message
// is always s.off, and the next call starts after it and its run. A
// segmented message the kernel refuses is sent again as plain datagrams
// (gsoFailed).
func (s *sendState) send(fd uintptr) bool {
	for s.off < s.n {
		r, _, errno := unix.Syscall6(unix.SYS_SENDMMSG, fd,
			uintptr(unsafe.Pointer(&s.hdrs[s.off])), uintptr(s.n-s.off), 0, 0, 0)
		switch errno {
		case 0:
			if r == 0 {
				s.err = io.ErrNoProgress
				return true
			}
			if s.suspect == s.off {
				s.gsoRefused()
			}
			s.off += int(r)
			if s.capped && s.off < s.n {
				s.n = s.build(s.off, s.first[s.off], 0)
				s.capped = false
			}
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			if s.hdrs[s.off].Hdr.Controllen != 0 {
				s.gsoFailed(errno)
				continue
			}
			if s.suspect == s.off {
				s.suspect = -1 // the destination's error, not GSO's
			}
			s.refuse(errno)
		}
	}
	return true
}

// release drops the references to the caller's buffers.
func (s *sendState) release() {
	for i := range s.bufs {
		s.iovs[i].Base = nil
	}
	s.bufs, s.errs = nil, nil
	s.n = 0
}
