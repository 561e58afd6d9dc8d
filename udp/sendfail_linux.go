//go:build linux

package udp

import (
	"net/netip"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// A datagram the kernel refuses costs its run, not the batch: sendState
// records the refusal for the refused message and for the messages right
// after it to the same destination (the kernel's verdict on a route or a
// firewall rule holds for them too; Send's whole remainder, as before),
// and the next sendmmsg starts after them, so the datagrams to the other
// destinations of a SendMany batch still go out.

// sendShared is what the sendStates of one bind share: the GSO gate and
// the refusal counts. Any number of Sends use it at once; every field is
// atomic or set once at Listen.
type sendShared struct {
	gso gsoGate
	// fails counts refused datagrams by reason: added to by whichever
	// Send saw the refusal, read by LinuxBind.SendFailures.
	fails [NumSendReasons]atomic.Uint64
}

// sendReason classifies a sendmmsg error.
func sendReason(errno unix.Errno) SendReason {
	switch errno {
	case unix.ENETUNREACH, unix.EHOSTUNREACH, unix.ENETDOWN, unix.EHOSTDOWN:
		return SendUnreachable
	case unix.EACCES, unix.EPERM:
		return SendProhibited
	case unix.EINVAL:
		return SendInvalid
	case unix.EMSGSIZE:
		return SendTooBig
	case unix.ENOBUFS, unix.ENOMEM:
		return SendNoBuffers
	}
	return SendOther
}

// refuse records that the kernel refused message s.off with errno, for
// its datagrams and those of the messages after it to the same
// destination, and moves s.off past them. It allocates nothing: errs
// gets the bare unix.Errno, which fits an interface without allocating.
func (s *sendState) refuse(errno unix.Errno) {
	d0 := s.first[s.off]
	to := s.dest(d0)
	m := s.off + 1
	for m < s.n && s.dest(s.first[m]) == to {
		m++
	}
	end := len(s.bufs)
	if m < s.n {
		end = s.first[m]
	}
	if s.firstErr == 0 {
		s.firstErr = errno
	}
	s.failed += end - d0
	if s.errs != nil {
		for d := d0; d < end; d++ {
			s.errs[d] = errno
		}
	}
	if s.sh != nil {
		s.sh.fails[sendReason(errno)].Add(uint64(end - d0))
	}
	s.off = m
}

// dest is the destination of datagram d of the current chunk.
func (s *sendState) dest(d int) netip.AddrPort {
	if s.eps != nil {
		return s.eps[d]
	}
	return s.dst
}

// SendFailures returns how many datagrams the kernel refused since
// Listen for reason r (a refused datagram also counts the datagrams
// after it to the same destination that were therefore not tried).
func (b *LinuxBind) SendFailures(r SendReason) uint64 {
	if r >= NumSendReasons {
		return 0
	}
	return b.tx.fails[r].Load()
}
