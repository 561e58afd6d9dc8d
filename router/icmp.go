package router

import (
	"sync"

	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/ratelimit"
	"github.com/bridgehead/bridgehead/tun"
)

// icmpResponder answers local hosts whose packets are too big for the
// tunnel with ICMP errors (tooBig), written to the TUN through out. The
// inside path calls tooBig (mu guards the buffers it writes in); limit
// is safe from any goroutine and the handshake loop runs its GC.
type icmpResponder struct {
	out   *tunDevice
	drops *Drops
	mtu   int
	limit *ratelimit.Limiter // errors per local source

	mu   sync.Mutex
	buf  []byte   // one error, at bufHeadroom
	bufs [][]byte // buf, as the batch out.write takes
}

func newICMPResponder(out *tunDevice, drops *Drops, mtu int, limit *ratelimit.Limiter) *icmpResponder {
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
