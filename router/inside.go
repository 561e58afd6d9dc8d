package router

import (
	"context"
	"errors"
	"fmt"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/router/packet"
	"github.com/bridgehead/bridgehead/tun"
)

// insideBatch is one inside loop's buffers, allocated once.
type insideBatch struct {
	bufs  [][]byte
	sizes []int
	out   [][]byte // sealed datagrams of the current run
	peer  *Peer    // peer of the current run
	bytes uint64   // inner bytes of the current run
	now   int64    // unix nanoseconds of the batch
}

func (r *Router) newInsideBatch() *insideBatch {
	n := r.tun.BatchSize()
	if n < 1 {
		n = 1
	}
	b := &insideBatch{bufs: make([][]byte, n), sizes: make([]int, n), out: make([][]byte, 0, n)}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, r.bufSize)
	}
	return b
}

// insideLoop reads plain packets from the TUN, seals them and sends them.
func (r *Router) insideLoop(ctx context.Context) error {
	b := r.newInsideBatch()
	failures := 0
	for {
		n, err := r.tun.Read(b.bufs, b.sizes, bufHeadroom)
		if err != nil {
			if errors.Is(err, tun.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			// One bad read (a packet too big for its buffer, a
			// transient device error) must not stop the gateway;
			// a device that only fails must.
			r.drops.Add(Inside, ReasonTUNReadError, 1)
			if failures++; failures >= maxConsecutiveErrors {
				return fmt.Errorf("TUN read failed %d times in a row: %w", failures, err)
			}
			if n == 0 {
				continue
			}
		} else {
			failures = 0
		}
		now := r.clock.Now()
		r.insideBusy.Store(now.UnixNano())
		r.routeBatch(b, n, now)
		r.insideBusy.Store(0)
	}
}

// routeBatch routes and seals the n packets in b and sends them. It is the
// inside hot path and allocates nothing.
func (r *Router) routeBatch(b *insideBatch, n int, now time.Time) {
	st := r.state.Load()
	b.now = now.UnixNano()
	for i := 0; i < n; i++ {
		size := b.sizes[i]
		pkt := b.bufs[i][bufHeadroom : bufHeadroom+size]
		dst, ok := packet.Destination(pkt)
		if !ok {
			r.drops.Add(Inside, ReasonMalformed, 1)
			continue
		}
		s, ok := st.table.Lookup(dst)
		if !ok {
			if dst.IsMulticast() || dst.IsLinkLocalUnicast() {
				r.drops.Add(Inside, ReasonNotUnicast, 1)
			} else {
				r.drops.Add(Inside, ReasonNoRoute, 1)
			}
			continue
		}
		if s.local {
			r.drops.Add(Inside, ReasonLocalDestination, 1)
			continue
		}
		if size > r.mtu {
			r.tooBig(st, pkt)
			continue
		}
		if st.clampMSS {
			r.clampMSS(pkt)
		}
		p := s.pick()
		if p == nil {
			r.drops.Add(Inside, ReasonNoSession, 1)
			continue
		}
		kp := p.current.Load()
		if kp == nil || !usable(kp, now) {
			if !p.queue.push(pkt) {
				r.drops.Add(Inside, ReasonQueueFull, 1)
			}
			r.wantHandshake(p)
			continue
		}
		if needsRekey(kp, now) {
			r.wantHandshake(p)
		}
		padded := bhcrypto.PaddedLen(size, r.mtu)
		clear(b.bufs[i][bufHeadroom+size : bufHeadroom+padded])
		msg, err := kp.Seal(b.bufs[i], padded)
		if err != nil {
			r.drops.Add(Inside, ReasonExpired, 1)
			r.wantHandshake(p)
			continue
		}
		if p != b.peer {
			r.flushInside(b)
			b.peer = p
		}
		b.out = append(b.out, msg)
		b.bytes += uint64(size)
	}
	r.flushInside(b)
}

// flushInside sends the current run of sealed datagrams to its peer.
func (r *Router) flushInside(b *insideBatch) {
	if len(b.out) == 0 {
		return
	}
	p := b.peer
	if err := r.bind.Send(b.out, p.Endpoint()); err != nil {
		r.drops.Add(Inside, ReasonSendError, uint64(len(b.out)))
	} else {
		p.txPackets.Add(uint64(len(b.out)))
		p.txBytes.Add(b.bytes)
		p.lastSend.Store(b.now)
		if p.unanswered.Load() == 0 {
			p.unanswered.CompareAndSwap(0, b.now)
		}
	}
	b.out = b.out[:0]
	b.bytes = 0
	b.peer = nil
}

// usable reports whether a session may carry packets at now.
func usable(kp *bhcrypto.Keypair, now time.Time) bool {
	return now.Sub(kp.Created) < RejectAfterTime && kp.SendCount() < bhcrypto.RejectAfterMessages
}

// needsRekey reports whether sending on kp should start a new handshake.
func needsRekey(kp *bhcrypto.Keypair, now time.Time) bool {
	age := now.Sub(kp.Created)
	if kp.SendCount() >= bhcrypto.RekeyAfterMessages {
		return true
	}
	if kp.Initiator {
		return age >= RekeyAfterTime
	}
	return age >= responderRekeyAfter
}

// wantHandshake asks the handshake loop to set up a session with p. It
// never blocks; repeated calls before the loop runs collapse into one.
func (r *Router) wantHandshake(p *Peer) {
	if !p.wantHandshake.CompareAndSwap(false, true) {
		return
	}
	select {
	case r.trigger <- p:
	default:
		p.wantHandshake.Store(false)
	}
}

// clampMSS lowers the MSS option of a TCP SYN or SYN-ACK to what fits the
// tunnel: the MTU minus the IP and TCP headers. The cheap protocol test
// keeps everything that is not TCP off ClampMSS.
func (r *Router) clampMSS(pkt []byte) {
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) > 9 && pkt[9] == packet.ProtoTCP {
			packet.ClampMSS(pkt, uint16(r.mtu-40))
		}
	case 6:
		if len(pkt) > 6 && pkt[6] == packet.ProtoTCP {
			packet.ClampMSS(pkt, uint16(r.mtu-60))
		}
	}
}

// tooBig drops a packet larger than the tunnel MTU and, when the sender
// asked not to fragment (IPv4 DF, or any IPv6 packet), tells it the MTU
// with an ICMP "fragmentation needed" / "packet too big", at most
// icmpRate per second, so path-MTU discovery works through us.
func (r *Router) tooBig(st *routingState, pkt []byte) {
	r.drops.Add(Inside, ReasonTooBig, 1)
	info, err := packet.Parse(pkt)
	if err != nil || !info.DontFragment {
		return
	}
	src := st.icmp4
	if info.Version == 6 {
		src = st.icmp6
	}
	if !src.IsValid() || !r.icmpLimit.Allow(info.Src) {
		return
	}
	r.icmpMu.Lock()
	defer r.icmpMu.Unlock()
	n := packet.ICMPTooBig(r.icmpBuf[bufHeadroom:], pkt, src, r.mtu)
	if n == 0 {
		return
	}
	r.icmpOut[0] = r.icmpBuf[:bufHeadroom+n]
	r.writeTUN(r.icmpOut)
}
