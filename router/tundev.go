package router

import (
	"errors"
	"sync"

	"github.com/bridgehead/bridgehead/tun"
)

// tunDevice is the Router's TUN. The inside loop reads it; the outside
// loop and the ICMP responder (the inside path) both write, one at a time:
// write holds mu, and nothing else calls the device's Write.
type tunDevice struct {
	tun.Device
	mu sync.Mutex
}

// write writes packets at bufHeadroom and returns how many it could not
// write. When the TUN stops at a packet it refuses (the kernel rejects
// malformed packets one at a time), that packet is dropped and the rest
// are written again. A backend that tried every packet and cannot say
// which failed (Offload) counts one per error it joined (a coalesced
// write that failed counts once, whatever it carried). The
// outside loop and the ICMP errors of the inside loop both write; the TUN
// takes one writer at a time.
func (d *tunDevice) write(bufs [][]byte) (failed int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for len(bufs) > 0 {
		n, err := d.Device.Write(bufs, bufHeadroom)
		switch {
		case err == nil:
			return failed
		case n >= len(bufs):
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				return failed + max(len(j.Unwrap()), 1)
			}
			return failed + 1
		case errors.Is(err, tun.ErrClosed):
			return failed + len(bufs) - n
		}
		failed++
		bufs = bufs[n+1:]
	}
	return failed
}
