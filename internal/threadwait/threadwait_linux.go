// Package threadwait blocks the calling OS thread in the kernel until a
// descriptor is readable.
//
// Go's reads park the goroutine and leave the wake-up to the runtime's
// network poller, which runs when some thread gets to it: under load,
// after whatever that thread is doing. A loop that must run the moment a
// packet arrives (the express lane's, on a locked real-time thread) waits
// with a Poller instead, so that the kernel wakes that very thread, with
// its scheduling priority, and then reads without blocking.
package threadwait

import (
	"errors"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Poller waits for one descriptor at a time. Its owner is the one
// goroutine that waits with it; the zero value is not ready, use New.
// Wait allocates nothing.
type Poller struct {
	fds [1]unix.PollFd
	ts  unix.Timespec
	n   int
	err error
	fn  func(uintptr)
}

// New returns a Poller.
func New() *Poller {
	p := &Poller{}
	p.fds[0].Events = unix.POLLIN
	p.fn = p.poll
	return p
}

func (p *Poller) poll(fd uintptr) {
	p.fds[0].Fd = int32(fd)
	p.fds[0].Revents = 0
	p.n, p.err = unix.Ppoll(p.fds[:], &p.ts, nil)
}

// Wait blocks in ppoll on the descriptor that c lends until it is
// readable (or has an error or hang-up to report) or timeout passes, and
// reports which. An interrupted wait counts as not ready. c holds the
// descriptor for the whole wait, so closing it takes effect by the end of
// timeout; callers keep timeout short and check for close between waits.
func (p *Poller) Wait(c syscall.RawConn, timeout time.Duration) (bool, error) {
	p.ts = unix.NsecToTimespec(int64(timeout))
	if err := c.Control(p.fn); err != nil {
		return false, err
	}
	if p.err != nil && !errors.Is(p.err, unix.EINTR) {
		return false, p.err
	}
	return p.n > 0 && p.fds[0].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0, nil
}
