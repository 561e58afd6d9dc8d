package router

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/transit"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// outsideBatch is one outside loop's buffers, allocated once.
type outsideBatch struct {
	bufs  [][]byte
	sizes []int
	eps   []netip.AddrPort
	out   [][]byte // decrypted packets to write to the TUN
	// replies are the probe replies of this batch, sent together after
	// it (see handleControl).
	replies controlBatch
	// lane is where the batch came from; its TUN queue takes the packets.
	lane *lane
	// rx counts the batch's packets per peer (see rxTally).
	rx rxTally
	// src and dst cache openTransport's lookups of the inner addresses
	// (siteCache).
	src, dst siteCache
	// mac1 checks handshake messages; a batch's own, since the hasher
	// keeps state and the batches of different loops run at once.
	mac1 *bhcrypto.MAC1Checker
}

func (r *Router) newOutsideBatch() *outsideBatch {
	n := r.bind.BatchSize()
	if n < 1 {
		n = 1
	}
	b := &outsideBatch{
		bufs: make([][]byte, n), sizes: make([]int, n),
		eps: make([]netip.AddrPort, n), out: make([][]byte, 0, n),
	}
	b.replies.init(n)
	b.lane = r.lanes[0]
	b.mac1 = r.hs.gate.newMAC1()
	// A TUN that coalesces writes (GRO) appends the following segments of
	// a flow into the first packet's buffer: give each buffer the spare
	// capacity it needs. The pages are touched only when used.
	// A gateway reached through a hub delivers relay messages, which
	// transit.Bind reads into the buffer's whole capacity before it
	// unwraps them: RelayOverhead more than the largest datagram.
	capacity := r.set.bufSize + bhcrypto.RelayOverhead
	if r.tun.BatchSize() > 1 {
		capacity = max(capacity, bufHeadroom+tun.OffloadWriteBufferSize)
	}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, r.set.bufSize, capacity)
	}
	return b
}

// outsideLoop reads datagrams from peers and delivers what authenticates.
func (r *Router) outsideLoop(ctx context.Context) error {
	return r.outsideLane(ctx, r.lanes[0])
}

// outsideLane is one lane's outside path: it receives on l's socket and
// writes to l's TUN queue.
func (r *Router) outsideLane(ctx context.Context, l *lane) error {
	b := r.newOutsideBatch()
	b.lane = l
	wait, release := r.expressOutsideWait(l)
	defer release()
	var guard *expressGuard
	if l == r.express.lane {
		// Only authenticated express transport messages, within
		// the express budget, are handled here (outside_express.go).
		guard = r.expressGuardFor(l)
		defer guard.stop()
	}
	failures := 0
	for {
		var n int
		err := waitThen(wait)
		if err == nil {
			n, err = l.bind.Receive(b.bufs, b.sizes, b.eps)
		}
		if err != nil {
			if errors.Is(err, udp.ErrClosed) || ctx.Err() != nil {
				return nil
			}
			r.drops.Add(Outside, ReasonUDPReadError, 1)
			if failures++; failures >= maxConsecutiveErrors {
				return fmt.Errorf("UDP receive failed %d times in a row: %w", failures, err)
			}
			if n == 0 {
				continue
			}
		} else {
			failures = 0
		}
		now := r.clock.Now()
		l.health.outside.Store(r.mono.ns(now))
		if guard != nil {
			r.express.count.received.Add(uint64(n))
			n = r.expressSort(guard, b, n, now)
		}
		r.receiveBatch(b, n, now)
		l.health.outside.Store(0)
	}
}

// receiveBatch handles n received datagrams. It is the outside hot path and
// allocates nothing for transport messages.
func (r *Router) receiveBatch(b *outsideBatch, n int, now time.Time) {
	st := r.state.Load()
	b.out = b.out[:0]
	strays := 0
	for i := 0; i < n; i++ {
		msg := b.bufs[i][:b.sizes[i]]
		if len(msg) < 4 {
			r.drops.Add(Outside, ReasonRunt, 1)
			continue
		}
		switch msg[0] {
		case bhcrypto.MsgTransport:
			if b.lane.stray(msg[1]) {
				strays++
			}
			if pkt, ok := r.openTransport(b, st, msg, b.eps[i], now); ok {
				b.out = append(b.out, b.bufs[i][:bufHeadroom+len(pkt)])
			}
		case bhcrypto.MsgInitiation, bhcrypto.MsgResponse, bhcrypto.MsgCookieReply:
			r.hs.receive(msg, b.eps[i], b.mac1)
		default:
			r.drops.Add(Outside, ReasonUnknownType, 1)
		}
	}
	if strays > 0 {
		b.lane.strays.Add(uint64(strays))
	}
	b.rx.flush()
	r.probe.send(&b.replies)
	if len(b.out) == 0 {
		return
	}
	if n := b.lane.tun.write(b.out); n > 0 {
		r.drops.Add(Outside, ReasonTUNWriteError, uint64(n))
	}
}

// openTransport authenticates and checks one transport message. On success
// it returns the inner packet (without padding), which starts at
// msg[bufHeadroom:]; keepalives return ok=false after refreshing liveness.
func (r *Router) openTransport(b *outsideBatch, st *routingState, msg []byte, from netip.AddrPort, now time.Time) ([]byte, bool) {
	idx, _, ok := bhcrypto.ParseTransportHeader(msg)
	if !ok {
		if len(msg) < bhcrypto.TransportOverhead {
			r.drops.Add(Outside, ReasonRunt, 1)
		} else {
			r.drops.Add(Outside, ReasonUnknownType, 1)
		}
		return nil, false
	}
	e, ok := r.index.lookup(idx)
	if !ok {
		r.drops.Add(Outside, ReasonUnknownIndex, 1)
		// A configured peer sending on a session we do not have: we
		// restarted, or forgot it. Offer a new handshake rather than
		// wait for the peer's no-answer timer. The source address is
		// not authenticated, so this only ever starts a handshake
		// (rate-bounded by the handshake loop) and only when we have
		// no usable session with that peer.
		if p := st.byEndpoint[from]; p != nil {
			if kp := p.current.Load(); kp == nil || !usable(kp, now) {
				r.hs.wantSession(p, now)
			}
		}
		return nil, false
	}
	if now.Sub(e.kp.Created) >= RejectAfterTime {
		r.drops.Add(Outside, ReasonExpired, 1)
		return nil, false
	}
	plain, counter, err := e.kp.Open(msg)
	if err != nil {
		r.drops.Add(Outside, ReasonBadTag, 1)
		return nil, false
	}
	if !e.checkReplay(counter, msg[1]) {
		r.drops.Add(Outside, ReasonReplay, 1)
		return nil, false
	}
	p := e.peer
	// The packet is authentic and new: it confirms a session we
	// answered, proves the peer alive, and tells us where it is now.
	if p.next.Load() == e.kp {
		r.confirm(p, e.kp, now)
	}
	// A batch shares one now: the stamp is written once per batch per
	// lane, not per packet (see rxTally).
	if ns := r.mono.ns(now); p.lastReceive.Load() != ns {
		p.lastReceive.Store(ns)
	}
	if from != *p.endpoint.Load() {
		r.roam(p, from)
	}
	b.rx.packet(p)
	if len(plain) == 0 {
		return nil, false // keepalive
	}
	if isControl(plain) {
		r.probe.handleControl(b, p, e.kp, plain, from, now)
		return nil, false
	}
	info, err := packet.Parse(plain)
	if err != nil {
		r.drops.Add(Outside, ReasonMalformed, 1)
		return nil, false
	}
	if s, ok := b.src.lookup(st, info.Src); !ok || s.name != p.site {
		r.drops.Add(Outside, ReasonSpoofedSource, 1)
		return nil, false
	} else if st.receiveRefused(s, info.Src) {
		r.refuse(Outside, s) // our site does not admit s's pods (sitepolicy.go)
		return nil, false
	}
	if s, ok := b.dst.lookup(st, info.Dst); !ok || !s.local {
		r.drops.Add(Outside, ReasonNotLocal, 1)
		return nil, false
	}
	b.rx.delivered(info.Length)
	if st.clampMSS && info.Protocol == packet.ProtoTCP {
		mss := r.set.mtu - 40
		if info.Version == 6 {
			mss = r.set.mtu - 60
		}
		packet.ClampMSS(plain[:info.Length], uint16(mss))
	}
	return plain[:info.Length], true
}

// confirm promotes a session we answered to current once the initiator has
// used it. The session it replaces stays as previous for packets in flight.
func (r *Router) confirm(p *Peer, kp *bhcrypto.Keypair, now time.Time) {
	gone, ok := p.keypairs.confirm(kp)
	if !ok {
		return
	}
	r.retire(gone)
	p.lastHandshake.Store(r.mono.ns(now))
	p.live.acked.Store(r.mono.ns(now)) // our response reached it
	r.hs.count.completed.Add(1)
	p.hsCompleted.Add(1)
	// Packets queued while this side waited can go now.
	if p.queue.Len() > 0 {
		r.hs.want(p)
	}
}

// roam follows p to from, where an authenticated message of p's session
// (a transport message, or a handshake that proved p's key) came from,
// unless from is a stand-in (transit.PseudoEndpoint: a gateway reached
// through a hub). The relay path below reports a relayed gateway's
// datagrams at its stand-in only on its own session, but nothing else
// may ever move a gateway onto one: a directly reached gateway moved
// onto another's stand-in would have its datagrams handed to a hub. A
// gateway configured at its stand-in stays there, whatever address its
// datagrams came from: the relay path chooses the hub or the direct path
// beneath it. Refusals are counted (ReasonRoamRefused), not dropped: the
// message itself is good. Any goroutine; roams are rare, so this is off
// the per-packet path.
func (r *Router) roam(p *Peer, from netip.AddrPort) {
	to := from
	if cfg := *p.configEndpoint.Load(); isStandIn(cfg) {
		to = cfg
	} else if isStandIn(from) {
		r.drops.Add(Outside, ReasonRoamRefused, 1)
		return
	}
	if to != *p.endpoint.Load() {
		ep := to // allocated only when the endpoint moves
		p.endpoint.Store(&ep)
	}
}

// isStandIn reports whether ep stands for a gateway reached through a hub.
func isStandIn(ep netip.AddrPort) bool {
	_, ok := transit.PseudoGateway(ep)
	return ok
}
