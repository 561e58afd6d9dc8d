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
// Offload hooks (not implemented yet, see the performance pass):
//
//   - UDP_GRO (receive): after setsockopt(SOL_UDP, UDP_GRO, 1) the kernel may
//     return several same-sized datagrams of one flow as one message, with
//     the segment size in a UDP_GRO control message. recvState would gain a
//     per-message control buffer (hdrs[i].Hdr.Control/Controllen, set up in
//     newRecvState and reset in prepare) and finish would split each
//     coalesced message into consecutive bufs/sizes/eps entries.
//   - UDP_SEGMENT (send, GSO): sendState.prepare would coalesce runs of
//     equal-length datagrams into one message with several iovecs and a
//     UDP_SEGMENT control message carrying the segment size, so one
//     mmsghdr sends up to 64 datagrams. The message count then differs from
//     len(bufs); send already loops over messages, not datagrams.
//
// Both would be switched on by new Options fields and probed at Listen
// (older kernels return ENOPROTOOPT), falling back to this plain path.

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
	for {
		r, _, errno := unix.Syscall6(unix.SYS_RECVMMSG, fd,
			uintptr(unsafe.Pointer(&s.hdrs[0])), uintptr(s.n), 0, 0, 0)
		switch errno {
		case 0:
			s.got = int(r)
			return true
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			return false
		default:
			s.err = os.NewSyscallError("recvmmsg", errno)
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
// of them so that concurrent Sends do not wait for each other's system calls.
type sendState struct {
	hdrs []unix.Mmsghdr
	iovs []unix.Iovec
	name sockaddr // destination, shared by every message of the batch

	n   int   // messages in the current chunk
	off int   // messages of the chunk already sent
	err error // system call error of the current chunk
	fn  func(fd uintptr) bool
}

func newSendState(batch int) *sendState {
	s := &sendState{
		hdrs: make([]unix.Mmsghdr, batch),
		iovs: make([]unix.Iovec, batch),
	}
	for i := range s.hdrs {
		h := &s.hdrs[i].Hdr
		h.Name = (*byte)(unsafe.Pointer(&s.name))
		h.Iov = &s.iovs[i]
		h.SetIovlen(1)
	}
	s.fn = s.send
	return s
}

// prepare points the first len(bufs) messages at bufs, all addressed to
// s.name (namelen bytes of it).
func (s *sendState) prepare(bufs [][]byte, namelen uint32) {
	for i, b := range bufs {
		s.iovs[i].Base = unsafe.SliceData(b)
		s.iovs[i].SetLen(len(b))
		s.hdrs[i].Hdr.Namelen = namelen
	}
	s.n, s.off, s.err = len(bufs), 0, nil
}

// send is the RawConn.Write callback. It loops over partial sendmmsg
// results and EINTR, returns false on EAGAIN to wait for writability, and
// true when the chunk is sent or failed (s.err).
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
			s.off += int(r)
		case unix.EINTR:
		case unix.EAGAIN:
			return false
		default:
			s.err = os.NewSyscallError("sendmmsg", errno)
			return true
		}
	}
	return true
}

// release drops the references to the caller's buffers.
func (s *sendState) release() {
	for i := range s.n {
		s.iovs[i].Base = nil
	}
	s.n = 0
}
