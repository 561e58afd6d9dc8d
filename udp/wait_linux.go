package udp

import "time"

// WaitReadable blocks the calling OS thread in the kernel until the
// socket has a datagram to read, timeout passes or the bind is closed,
// and reports whether Receive would return at once (package threadwait
// says why a real-time loop waits so). Close takes effect by the end of a
// wait in progress. It allocates nothing. It is for the one goroutine
// that calls Receive.
func (b *LinuxBind) WaitReadable(timeout time.Duration) (bool, error) {
	if b.closed.Load() {
		return false, ErrClosed
	}
	b.recvMu.Lock()
	defer b.recvMu.Unlock()
	if b.gro && b.groRecv.pending() {
		return true, nil
	}
	ready, err := b.waiter.Wait(b.raw, timeout)
	if err != nil {
		return false, b.mapErr(err)
	}
	return ready, nil
}
