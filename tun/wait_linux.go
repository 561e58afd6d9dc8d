package tun

import (
	"fmt"
	"os"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/internal/threadwait"
)

// queueWaiter is what WaitReadable keeps of a queue: the descriptor to
// wait on and the poller. The one goroutine that reads the queue owns it.
type queueWaiter struct {
	raw  syscall.RawConn
	poll *threadwait.Poller
}

func newQueueWaiter(f *os.File) (*queueWaiter, error) {
	raw, err := f.SyscallConn()
	if err != nil {
		return nil, fmt.Errorf("tun: wait: %w", err)
	}
	return &queueWaiter{raw: raw, poll: threadwait.New()}, nil
}

func (w *queueWaiter) wait(timeout time.Duration, keepP bool) (bool, error) {
	ready, err := w.poll.Wait(w.raw, timeout, keepP)
	if err != nil {
		return false, ErrClosed
	}
	return ready, nil
}

// WaitReadable blocks the calling OS thread in the kernel until the queue
// has a packet to read, timeout passes or the device is closed, and
// reports whether Read would return at once (package threadwait says why
// a real-time loop waits so). Close takes effect by the end of a wait in
// progress. With keepP the goroutine keeps its P while it waits
// (threadwait.Poller.Wait). It is for the one goroutine that calls Read,
// and allocates nothing after its first call.
func (d *Offload) WaitReadable(timeout time.Duration, keepP bool) (bool, error) {
	if d.closed.Load() {
		return false, ErrClosed
	}
	if d.waiter == nil {
		w, err := newQueueWaiter(d.dev.File())
		if err != nil {
			return false, err
		}
		d.waiter = w
	}
	return d.waiter.wait(timeout, keepP)
}

// WaitReadable is Offload.WaitReadable for a Water queue.
func (w *Water) WaitReadable(timeout time.Duration, keepP bool) (bool, error) {
	if w.closed.Load() {
		return false, ErrClosed
	}
	if w.waiter == nil {
		qw, err := newQueueWaiter(w.file)
		if err != nil {
			return false, err
		}
		w.waiter = qw
	}
	return w.waiter.wait(timeout, keepP)
}
