// Package threadwait blocks the calling OS thread in the kernel until a
// descriptor is readable.
//
// Go's reads park the goroutine and leave the wake-up to the runtime's
// network poller, which runs when some thread gets to it: under load,
// after whatever that thread is doing. A loop that must run the moment a
// packet arrives (the express lane's, on a locked real-time thread) waits
// with a Poller instead, so that the kernel wakes that very thread, with
// its scheduling priority, and then reads without blocking.
//
// A Go system call gives the goroutine's P (the runtime's right to run
// Go code) back to the scheduler while it blocks, and takes one again
// when it returns. When the bulk lanes keep every P busy, the woken
// thread finds none: it queues until one is handed off, which is the
// delay the express lane exists to avoid. The runtime's remedy, more Ps
// than cores, lets bulk goroutines run on the spare ones as soon as the
// waiter leaves them, so more threads share the cores, for more CPU per
// byte (bench/README.md, "The real-time lane's cost, separated").
//
// Wait with keepP blocks without telling the runtime (a raw system
// call), so the P stays with the waiting goroutine and runs nothing else:
// a P reserved for the loop, which the caller adds to GOMAXPROCS for it.
// The runtime still takes it back when it must, by the signal it
// preempts running goroutines with: the signal ends the wait early (as
// not ready), and the goroutine yields at its next preemption check.
// That happens when the world stops (garbage collection) and when the
// same goroutine has held the P for 10 ms (sysmon), so a wait with
// keepP lasts at most about 10 ms, and the waiter's loop simply waits
// again.
package threadwait

import (
	"errors"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Poller waits for one descriptor at a time. Its owner is the one
// goroutine that waits with it; the zero value is not ready, use New.
// Wait allocates nothing.
type Poller struct {
	fds   [1]unix.PollFd
	ts    unix.Timespec
	keepP bool
	n     int
	err   error
	fn    func(uintptr)
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
	if !p.keepP {
		p.n, p.err = unix.Ppoll(p.fds[:], &p.ts, nil)
		return
	}
	n, _, errno := unix.RawSyscall6(unix.SYS_PPOLL, uintptr(unsafe.Pointer(&p.fds[0])), 1, uintptr(unsafe.Pointer(&p.ts)), 0, 0, 0)
	p.n, p.err = int(n), nil
	if errno != 0 {
		p.n, p.err = 0, errno
	}
}

// Wait blocks in ppoll on the descriptor that c lends until it is
// readable (or has an error or hang-up to report) or timeout passes, and
// reports which. An interrupted wait counts as not ready. c holds the
// descriptor for the whole wait, so closing it takes effect by the end of
// timeout; callers keep timeout short and check for close between waits.
// With keepP the goroutine keeps its P while it waits (see the package
// doc): only for a goroutine locked to its thread, with a P added to
// GOMAXPROCS for it.
func (p *Poller) Wait(c syscall.RawConn, timeout time.Duration, keepP bool) (bool, error) {
	p.ts = unix.NsecToTimespec(int64(timeout))
	p.keepP = keepP
	if err := c.Control(p.fn); err != nil {
		return false, err
	}
	if p.err != nil && !errors.Is(p.err, unix.EINTR) {
		return false, p.err
	}
	return p.n > 0 && p.fds[0].Revents&(unix.POLLIN|unix.POLLERR|unix.POLLHUP) != 0, nil
}
