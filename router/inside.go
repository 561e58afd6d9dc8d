package router

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// insideBatch is the buffers of one TUN read, allocated once, and the run
// of sealed datagrams they feed.
type insideBatch struct {
	bufs  [][]byte
	sizes []int
	n     int // packets read into bufs (pipeline only)
	// flows, when not nil, is each packet's flow hash, computed when it
	// was read (fair-queue path); otherwise route hashes with frags.
	flows []uint64
	// frags is the fragment table of the lane whose packets these are,
	// shared by the lane's slots and used only by whoever routes them
	// (insidePipe.mu, or the express lane's inside loop); see flowhash.Table.
	frags *flowhash.Table
	run   *sealRun // where route collects sealed datagrams
	// express: the packets are of sparse flows, sealed for the express
	// lane where the peer has one (package sparse).
	express bool
	// dst caches route's last destination lookup (siteCache).
	dst siteCache
}

// sealRun is the sealed datagrams waiting for one sendmmsg: a run of
// consecutive packets to the same peer.
type sealRun struct {
	out   [][]byte // sealed datagrams of the current run
	flows []uint64 // flow hash of each of out (see FlowSender)
	peer  *Peer    // peer of the current run
	bytes uint64   // inner bytes of the current run
	now   int64    // time of the batch (monotonic nanoseconds, see monoEpoch)
	// bind sends the run: its lane's socket (nil: lane 0's). flowSend is
	// bind as a FlowSender, or nil; both are set once by newSealRun, so
	// that a flush asserts nothing.
	bind     udp.Bind
	flowSend FlowSender
	// sortOut and sortFlows are sortByLane's scratch.
	sortOut   [][]byte
	sortFlows []uint64
}

// newSealRun is a run of up to n datagrams sent on bind.
func newSealRun(bind udp.Bind, n int) *sealRun {
	fs, _ := bind.(FlowSender)
	return &sealRun{out: make([][]byte, 0, n), flows: make([]uint64, 0, n), bind: bind, flowSend: fs}
}

// newInsideSlot returns buffers for one TUN read, without a run, hashing
// with the lane's fragment table frags.
func (r *Router) newInsideSlot(frags *flowhash.Table) *insideBatch {
	n := max(r.tun.BatchSize(), 1)
	b := &insideBatch{bufs: make([][]byte, n), sizes: make([]int, n), frags: frags}
	for i := range b.bufs {
		b.bufs[i] = make([]byte, r.set.bufSize)
	}
	return b
}

// The inside path runs on two goroutines that share one sealer state
// (mu). The reader reads the TUN. A read of several packets (a TCP
// super-packet split by the offload TUN) and a read after a quiet spell
// are sealed and sent by the reader itself, run to completion, so bulk
// flows keep their data on one core and a lone packet (an idle ping) pays
// no hand-off. A single packet that follows closely on the previous read
// goes to a queue instead, and the sealer goroutine takes everything
// queued at once into one run and one sendmmsg: small packets, which the
// TUN hands over one per read, get batched that way, and reading overlaps
// with sealing. Whoever holds mu first seals what is queued, so
// packets leave in the order they were read.
const (
	// insideSlots is how many TUN reads can wait for the sealer.
	insideSlots = 16
	// insideQuietGap is how long the TUN must have been quiet for a
	// single packet to be sealed by the reader instead of queued.
	insideQuietGap = 50 * time.Microsecond
)

// insidePipe is the inside path's state shared by its two goroutines.
type insidePipe struct {
	free chan *insideBatch // slots ready for a TUN read
	full chan *insideBatch // reads waiting for the sealer, in read order
	wake chan struct{}     // the sealer has work; capacity 1
	run  *sealRun

	mu    sync.Mutex // held while sealing; guards run and draining full
	taken []*insideBatch

	lane *lane // the TUN queue read and the socket sent on
}

// insideLoop reads plain packets from the TUN, seals them and sends them,
// until the TUN is closed or fails for good.
func (r *Router) insideLoop(ctx context.Context) error {
	return r.insideLane(ctx, r.lanes[0])
}

// insideLane is one lane's inside path: it reads l's TUN queue and sends
// on l's socket.
func (r *Router) insideLane(ctx context.Context, l *lane) error {
	if !r.set.fifoInside {
		return r.insideLaneFQ(ctx, l)
	}
	p := r.newInsidePipe(l)
	done := make(chan struct{})
	go func() {
		defer close(done)
		for range p.wake {
			r.sealQueued(p, nil)
		}
		r.sealQueued(p, nil)
	}()
	err := r.readTUN(ctx, p)
	close(p.wake)
	<-done
	return err
}

// newInsidePipe allocates the inside path's slots and run, once.
func (r *Router) newInsidePipe(l *lane) *insidePipe {
	bs := max(r.tun.BatchSize(), 1)
	p := &insidePipe{
		free:  make(chan *insideBatch, insideSlots),
		full:  make(chan *insideBatch, insideSlots),
		wake:  make(chan struct{}, 1),
		run:   newSealRun(l.bind, insideSlots*bs),
		taken: make([]*insideBatch, 0, insideSlots),
		lane:  l,
	}
	frags := r.flows.NewTable() // the lane's: its slots are routed under p.mu
	for range insideSlots {
		b := r.newInsideSlot(frags)
		b.run = p.run
		p.free <- b
	}
	return p
}

// readTUN is the inside reader: it reads the TUN into free slots and seals
// or queues each read (see insidePipe).
func (r *Router) readTUN(ctx context.Context, p *insidePipe) error {
	failures := 0
	var last time.Time
	for {
		b := <-p.free
		n, err := p.lane.tun.Read(b.bufs, b.sizes, bufHeadroom)
		if err != nil {
			if errors.Is(err, tun.ErrClosed) || ctx.Err() != nil {
				p.free <- b // cannot block: b came from free
				return nil
			}
			// One bad read (a packet too big for its buffer, a
			// transient device error) must not stop the gateway;
			// a device that only fails must. Packets read before
			// the error still go out.
			r.drops.Add(Inside, ReasonTUNReadError, 1)
			if failures++; failures >= maxConsecutiveErrors {
				if n > 0 { // read with the last error: not sent
					r.drops.Add(Inside, ReasonTUNReadError, uint64(n))
				}
				p.free <- b
				return fmt.Errorf("TUN read failed %d times in a row: %w", failures, err)
			}
		} else {
			failures = 0
		}
		if n == 0 {
			p.free <- b
			continue
		}
		b.n = n
		now := r.clock.Now()
		quiet := now.Sub(last) > insideQuietGap
		last = now
		if n > 1 || quiet {
			r.sealQueued(p, b)
			// The gap to the next read starts now, not before
			// the sealing.
			last = r.clock.Now()
			continue
		}
		p.full <- b
		select {
		case p.wake <- struct{}{}:
		default: // the sealer will look at the queue anyway
		}
	}
}

// sealQueued seals and sends every queued read, then own (if not nil),
// holding p.mu, and gives the slots back.
func (r *Router) sealQueued(p *insidePipe, own *insideBatch) {
	p.mu.Lock()
	defer p.mu.Unlock()
	taken := p.taken[:0]
drain:
	for len(taken) < cap(taken) {
		select {
		case b := <-p.full:
			taken = append(taken, b)
		default:
			break drain
		}
	}
	if own != nil {
		taken = append(taken, own)
	}
	if len(taken) == 0 {
		return
	}
	now := r.clock.Now()
	p.lane.health.inside.Store(r.mono.ns(now))
	p.run.now = r.mono.ns(now)
	for _, b := range taken {
		r.route(b, b.n, now)
	}
	r.flushInside(p.run)
	p.lane.health.inside.Store(0)
	for i, b := range taken {
		b.n = 0
		p.free <- b
		taken[i] = nil
	}
	p.taken = taken[:0]
}

// route routes and seals the n packets in b into b.run, sending the run
// whenever the peer changes; the caller flushes the last run. It is the
// inside hot path and allocates nothing.
func (r *Router) route(b *insideBatch, n int, now time.Time) {
	st := r.state.Load()
	run := b.run
	var ctrs counterBlock // this call's send counters, see counterBlock
	var sent sendCounts   // this call's reading of them, see sendCounts
	for i := 0; i < n; i++ {
		size := b.sizes[i]
		pkt := b.bufs[i][bufHeadroom : bufHeadroom+size]
		dst, ok := packet.Destination(pkt)
		if !ok {
			r.drops.Add(Inside, ReasonMalformed, 1)
			continue
		}
		s, ok := b.dst.lookup(st, dst)
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
		if s.policy.refusesLocal && st.sendRefused(s, pkt) {
			r.refuse(Inside, s) // s does not admit our pods (sitepolicy.go)
			continue
		}
		if size > r.set.mtu {
			r.icmp.tooBig(st, pkt)
			continue
		}
		if st.clampMSS {
			r.clampMSS(pkt)
		}
		var flow uint64
		if b.flows != nil {
			flow = b.flows[i]
		} else {
			flow = b.frags.Hash(pkt) // fragments follow their flow (see package flowhash)
		}
		p := s.pickFlow(flow, now)
		if p == nil {
			r.drops.Add(Inside, ReasonNoSession, 1)
			continue
		}
		kp := p.current.Load()
		ready := kp != nil && usableCount(kp, now, sent.of(kp))
		if !ready || p.queue.Busy() {
			// No session yet, or packets queued before it was set
			// up are still going out (the handshake loop flushes
			// them after it makes the session current): this one
			// waits behind them, so a flow is not reordered.
			if run.peer == p {
				r.flushInside(run)
			}
			if !p.queue.Push(pkt) {
				r.drops.Add(Inside, ReasonQueueFull, 1)
			}
			// A pending handshake's response flushes the queue;
			// with a session, the loop flushes what is left. The
			// session is looked at again after the push: one made
			// current meanwhile (confirm, as responder) may have
			// checked the queue before this packet was in it.
			// Without one, and no handshake in flight, the loop is
			// asked for one, unless our pace is holding new
			// attempts back (wantSession).
			if ready {
				r.hs.want(p)
			} else if kp := p.current.Load(); kp != nil && usable(kp, now) {
				r.hs.want(p)
			} else if !p.handshaking.Load() {
				r.hs.wantSession(p, now)
			}
			continue
		}
		if !p.handshaking.Load() && r.rekeyDue(kp, now, sent.of(kp)) {
			r.hs.wantSession(p, now)
		}
		padded := bhcrypto.PaddedLen(size, r.set.mtu)
		clear(b.bufs[i][bufHeadroom+size : bufHeadroom+padded])
		var msg []byte
		counter, ok := ctrs.take(kp, n-i)
		if ok {
			lb := laneByte(p, kp, r.laneFlow(pkt, flow), b.express)
			var err error
			msg, err = kp.SealLaneAt(b.bufs[i], padded, lb, counter)
			ok = err == nil
			if ok && lb == udp.ExpressLane {
				r.express.count.sent.Add(1)
			}
		}
		if !ok { // the session's counters are spent
			r.drops.Add(Inside, ReasonExpired, 1)
			r.hs.wantSession(p, now)
			continue
		}
		if p != run.peer {
			r.flushInside(run)
			run.peer = p
		}
		run.out = append(run.out, msg)
		run.flows = append(run.flows, flow)
		run.bytes += uint64(size)
	}
}

// flushInside sends the current run of sealed datagrams to its peer.
func (r *Router) flushInside(b *sealRun) {
	if len(b.out) == 0 {
		return
	}
	p := b.peer
	bind, fs := b.bind, b.flowSend
	if bind == nil { // a run made without its bind (tests): lane 0's
		bind = r.bind
		fs, _ = bind.(FlowSender)
	}
	b.sortByLane()
	var err error
	if fs != nil {
		err = fs.SendFlows(b.out, b.flows, p.Endpoint())
	} else {
		err = bind.Send(b.out, p.Endpoint())
	}
	if err != nil {
		r.drops.Add(Inside, ReasonSendError, uint64(len(b.out)))
	} else {
		p.txPackets.Add(uint64(len(b.out)))
		p.txBytes.Add(b.bytes)
		p.lastSend.Store(b.now)
	}
	clear(b.out) // drop references to buffers that go back to the reader
	b.out, b.flows = b.out[:0], b.flows[:0]
	b.bytes = 0
	b.peer = nil
}

// FlowSender is a bind that spreads datagrams by their flow: the relay
// path (package transit) sends each relayed datagram through the hub
// gateway that ranks first for its flow, as site.pick does for a site's
// gateways. flows[i] is the flow hash (package flowhash) of the packet sealed
// in bufs[i]; the bind must not keep either slice.
type FlowSender interface {
	SendFlows(bufs [][]byte, flows []uint64, ep netip.AddrPort) error
}

// usable reports whether a session may carry packets at now: it is
// younger than RejectAfterTime and has send counters left. It reads the
// send counter, which every lane's sealer writes: the data path reads it
// once per batch instead (sendCounts, usableCount).
func usable(kp *bhcrypto.Keypair, now time.Time) bool {
	return usableCount(kp, now, kp.SendCount())
}

// usableCount is usable with sent, a reading of kp.SendCount. A reading
// taken earlier in the batch can only be lower than the counter: the
// sealer's reservation (crypto.Keypair.ReserveCounters) refuses a spent
// session whatever usableCount said, so a session past its message limit
// never seals.
func usableCount(kp *bhcrypto.Keypair, now time.Time, sent uint64) bool {
	return fresh(kp, now) && sent < bhcrypto.RejectAfterMessages
}

// fresh is usable's time limit alone: what site.pick reads for each
// gateway of a site, per packet. The message limit cannot be what makes
// a fresh session unusable: spending RekeyAfterMessages (2^60) counters
// in RejectAfterTime (180 s) takes over 6·10^15 packets a second; and
// if it were, the sealer refuses the session and route asks for a new
// one (ReasonExpired).
func fresh(kp *bhcrypto.Keypair, now time.Time) bool {
	return now.Sub(kp.Created) < RejectAfterTime
}

// needsRekey reports whether sending on kp should start a new handshake.
// The initiator rekeys after r.set.rekeyAfter, the responder later (as much
// later as responderRekeyAfter is after RekeyAfterTime, never past it).
func (r *Router) needsRekey(kp *bhcrypto.Keypair, now time.Time) bool {
	return r.rekeyDue(kp, now, kp.SendCount())
}

// rekeyDue is needsRekey with sent, a reading of kp.SendCount.
func (r *Router) rekeyDue(kp *bhcrypto.Keypair, now time.Time, sent uint64) bool {
	if sent >= bhcrypto.RekeyAfterMessages {
		return true
	}
	age := now.Sub(kp.Created)
	if kp.Initiator {
		return age >= r.set.rekeyAfter
	}
	return age >= min(r.set.rekeyAfter+responderRekeyAfter-RekeyAfterTime, responderRekeyAfter)
}

// sendCounts is one route call's reading of a session's send counter,
// for the message limits of usable and needsRekey. The counter is written
// by every lane that seals the session (once per reservation, see
// counterBlock); reading it for every packet, as those checks did, made
// each lane miss on its cache line after every other lane's reservation.
// Read once per batch and session, the limits apply from the next batch:
// rekeying starts at the same count, at most one batch (one TUN read
// of a lane) later, and the sealer's reservation still refuses a spent
// session. It lives on the stack of one route call, like counterBlock.
type sendCounts struct {
	kp   *bhcrypto.Keypair
	sent uint64
}

// of returns kp's send count, read once per call while kp stays the same.
func (s *sendCounts) of(kp *bhcrypto.Keypair) uint64 {
	if s.kp != kp {
		s.kp, s.sent = kp, kp.SendCount()
	}
	return s.sent
}

// clampMSS lowers the MSS option of a TCP SYN or SYN-ACK to what fits the
// tunnel: the MTU minus the IP and TCP headers. The cheap protocol test
// keeps everything that is not TCP off ClampMSS.
func (r *Router) clampMSS(pkt []byte) {
	switch pkt[0] >> 4 {
	case 4:
		if len(pkt) > 9 && pkt[9] == packet.ProtoTCP {
			packet.ClampMSS(pkt, uint16(r.set.mtu-40))
		}
	case 6:
		if len(pkt) > 6 && pkt[6] == packet.ProtoTCP {
			packet.ClampMSS(pkt, uint16(r.set.mtu-60))
		}
	}
}
