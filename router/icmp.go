package router

import (
	"errors"
	"sync"

	"github.com/bridgehead/bridgehead/ratelimit"
	"github.com/bridgehead/bridgehead/router/packet"
	"github.com/bridgehead/bridgehead/tun"
)

// tunWriter is the TUN's write side. The outside loop and the ICMP
// responder (the inside path) both write; mu lets one writer at a time.
type tunWriter struct {
	mu  sync.Mutex
	dev tun.Device
}

// write writes packets at bufHeadroom and returns how many it could not
// write. When the TUN stops at a packet it refuses (the kernel rejects
// malformed packets one at a time), that packet is dropped and the rest
// are written again. A backend that tried every packet and cannot say
// which failed (Offload) counts one per error it joined (a coalesced
// write that failed counts once, whatever it carried). The
// outside loop and the ICMP errors of the inside loop both write; the TUN
// takes one writer at a time.
func (w *tunWriter) write(bufs [][]byte) (failed int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(bufs) > 0 {
		n, err := w.dev.Write(bufs, bufHeadroom)
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

// icmpResponder answers local hosts whose packets are too big for the
// tunnel with ICMP errors (tooBig), written to the TUN through out. The
// inside path calls tooBig (mu guards the buffers it writes in); limit
// is safe from any goroutine and the handshake loop runs its GC.
type icmpResponder struct {
	out   *tunWriter
	drops *Drops
	mtu   int
	limit *ratelimit.Limiter // errors per local source

	mu   sync.Mutex
	buf  []byte   // one error, at bufHeadroom
	bufs [][]byte // buf, as the batch out.write takes
}

func newICMPResponder(out *tunWriter, drops *Drops, mtu int, limit *ratelimit.Limiter) *icmpResponder {
	return &icmpResponder{
		out: out, drops: drops, mtu: mtu, limit: limit,
		buf:  make([]byte, bufHeadroom+1280, bufHeadroom+tun.OffloadWriteBufferSize),
		bufs: make([][]byte, 1),
	}
}

// tooBig drops a packet larger than the tunnel MTU and, when the sender
// asked not to fragment (IPv4 DF, or any IPv6 packet), tells it the MTU
// with an ICMP "fragmentation needed" / "packet too big", at most
// ICMPRate per second per source, so path-MTU discovery works through us.
func (i *icmpResponder) tooBig(st *routingState, pkt []byte) {
	i.drops.Add(Inside, ReasonTooBig, 1)
	info, err := packet.Parse(pkt)
	if err != nil || !info.DontFragment {
		return
	}
	src := st.icmp4
	if info.Version == 6 {
		src = st.icmp6
	}
	if !src.IsValid() || !i.limit.Allow(info.Src) {
		return
	}
	i.mu.Lock()
	defer i.mu.Unlock()
	n := packet.ICMPTooBig(i.buf[bufHeadroom:], pkt, src, i.mtu)
	if n == 0 {
		return
	}
	i.bufs[0] = i.buf[:bufHeadroom+n]
	i.out.write(i.bufs)
}
