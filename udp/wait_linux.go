package udp

import "time"

// ReadWaiter is a device whose reads a real-time loop waits for in the
// kernel, on its own thread (package threadwait says why): LinuxBind,
// transit.Bind over one, and tun's Offload and Water queues. With keepP
// the waiting goroutine keeps its P (threadwait.Poller.Wait).
type ReadWaiter interface {
	WaitReadable(timeout time.Duration, keepP bool) (bool, error)
}

var _ ReadWaiter = (*LinuxBind)(nil)

// WaitReadable blocks the calling OS thread in the kernel until the
// socket has a datagram to read, timeout passes or the bind is closed,
// and reports whether Receive would return at once (package threadwait
// says why a real-time loop waits so). Close takes effect by the end of a
// wait in progress. It allocates nothing. It is for the one goroutine
// that calls Receive. With keepP it keeps its P while it waits
// (threadwait.Poller.Wait).
func (b *LinuxBind) WaitReadable(timeout time.Duration, keepP bool) (bool, error) {
	if b.closed.Load() {
		return false, ErrClosed
	}
	b.recvMu.Lock()
	defer b.recvMu.Unlock()
	if b.gro && b.groRecv.pending() {
		return true, nil
	}
	ready, err := b.waiter.Wait(b.raw, timeout, keepP)
	if err != nil {
		return false, b.mapErr(err)
	}
	return ready, nil
}
