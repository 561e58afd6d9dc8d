package transit

import (
	"errors"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/udp"
)

// Relayed paths as endpoints. The router knows gateways by the endpoint
// it sends to and hears from. A gateway reached through a hub gets a
// pseudo endpoint, [100::id]:1 (100::/64 is the discard-only prefix of
// RFC 6666, so no real datagram ever goes there): Bind wraps what the
// router sends there in a relay message for a hub, and reports what a hub
// delivers from that gateway as coming from there. The router's own
// rules then apply unchanged: sessions, probes, anti-spoofing by the
// session's gateway. A gateway configured at its pseudo endpoint stays
// there (the Bind chooses hub or direct path beneath it), and no other
// gateway ever moves onto a pseudo endpoint (router, roaming).

var pseudoPrefix = netip.MustParsePrefix("100::/64")

// PseudoEndpoint is the endpoint standing for gateway id reached through
// a hub.
func PseudoEndpoint(id GatewayID) netip.AddrPort {
	a := [16]byte{0: 0x01}
	a[12], a[13], a[14], a[15] = byte(id>>24), byte(id>>16), byte(id>>8), byte(id)
	return netip.AddrPortFrom(netip.AddrFrom16(a), 1)
}

// PseudoGateway returns the gateway a pseudo endpoint stands for.
func PseudoGateway(ep netip.AddrPort) (GatewayID, bool) {
	a := ep.Addr()
	if !a.Is6() || !pseudoPrefix.Contains(a) || ep.Port() != 1 {
		return None, false
	}
	b := a.As16()
	return GatewayID(uint32(b[12])<<24 | uint32(b[13])<<16 | uint32(b[14])<<8 | uint32(b[15])), true
}

// SessionTable is what Bind needs of the router: sessions by receiver
// index and the current one per gateway, by static key. Both are called
// from the data path, concurrently, and must not allocate.
type SessionTable interface {
	// SessionByIndex returns the session whose LocalIndex is idx and
	// the key of the gateway it is with.
	SessionByIndex(idx uint32) (*bhcrypto.Keypair, bhcrypto.PublicKey, bool)
	// CurrentSession returns the session to send to the gateway of key
	// on, and where it is.
	CurrentSession(key bhcrypto.PublicKey) (*bhcrypto.Keypair, netip.AddrPort, bool)
	// PeerUp reports whether the gateway of key answers our probes.
	PeerUp(key bhcrypto.PublicKey) bool
	// NoteRelayed counts n relay messages (bytes inner bytes) sent to
	// the gateway of key as a hub: traffic toward it.
	NoteRelayed(key bhcrypto.PublicKey, n, bytes uint64)
}

// keyedSessions is Sessions over a SessionTable and the Relay's Plan.
type keyedSessions struct {
	table SessionTable
	relay *Relay
}

func (s keyedSessions) Session(index uint32) (*bhcrypto.Keypair, GatewayID, bool) {
	kp, key, ok := s.table.SessionByIndex(index)
	if !ok {
		return nil, None, false
	}
	plan, _ := s.relay.Plan()
	if plan == nil {
		return nil, None, false
	}
	id, ok := plan.ByKey(key)
	return kp, id, ok
}

// Current refuses a gateway the local one reaches through a hub itself:
// relays go one hop.
func (s keyedSessions) Current(gw GatewayID) (*bhcrypto.Keypair, netip.AddrPort, bool) {
	plan, _ := s.relay.Plan()
	if plan == nil || gw < 0 || int(gw) >= plan.Len() {
		return nil, netip.AddrPort{}, false
	}
	kp, to, ok := s.table.CurrentSession(plan.Gateway(gw).Key)
	if !ok || !to.IsValid() {
		return nil, netip.AddrPort{}, false
	}
	if _, pseudo := PseudoGateway(to); pseudo {
		return nil, netip.AddrPort{}, false
	}
	return kp, to, true
}

// Bind is a udp.Bind with the relay path under it: the router gets it in
// place of the socket's bind.
//
//   - Send (and SendFlows) to a PseudoEndpoint wraps each datagram in a
//     relay message for the hub gateway its flow goes through (spread.go)
//     and sends it there.
//   - Receive hands the router what it should see: relay messages for
//     which this gateway is the hub are forwarded at once and not
//     returned; ones a hub delivers come back as the datagram they carry,
//     moved to the start of the buffer, from the origin's pseudo endpoint
//     (a relayed transport message whose session is with another gateway
//     than the hub names is dropped, ReasonOriginMismatch); dropped ones
//     are not returned. Everything else passes through.
//
// Concurrency: Receive is called by one goroutine (the router's outside
// loop); Send and SendMany by any, concurrently.
type Bind struct {
	inner udp.Bind
	relay *Relay
	sess  keyedSessions
	// pool holds send scratch for wrapping (no allocation in steady
	// state).
	pool sync.Pool
	// rx is Receive's state; deferred is Process's (under deferredMu),
	// for a Bind whose relay messages are handled off the receiving
	// goroutine (DeferRelay).
	rx         rxState
	deferRelay atomic.Bool
	deferredMu sync.Mutex
	deferred   rxState
}

// rxState is one receiving goroutine's scratch: the forwards of one
// batch, and the batch's buffers at their whole capacity.
type rxState struct {
	fwdBufs [][]byte
	fwdEps  []netip.AddrPort
	rbufs   [][]byte
	// fwdBy is flush's scratch for grouping the forwards by next hop.
	fwdBy hopGroups
	// hinted is when this hub last told each pair of spokes each
	// other's mapping (direct.go), by their ids in hintedIn, the view
	// it was kept for (a new Plan may give the ids to other gateways).
	hinted   map[[2]GatewayID]int64
	hintedIn *view
	// signalled is when this hub last told a sender (first) it has no
	// session with a destination (second), by their ids in
	// signalledIn (nosession.go).
	signalled   map[[2]GatewayID]int64
	signalledIn *view
}

// manySender is a bind that sends to several endpoints in one call.
type manySender interface {
	SendMany(bufs [][]byte, eps []netip.AddrPort) error
}

// eachSender is a manySender that says which datagrams were refused
// (udp.LinuxBind.SendManyEach).
type eachSender interface {
	SendManyEach(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, err error)
}

// sendScratch is one Send's wrapped copies.
type sendScratch struct {
	bufs [][]byte
	eps  []netip.AddrPort
	// pos is, for SendMany, each of bufs' position in the caller's
	// batch, and errs the inner bind's answer for each of bufs.
	pos   []int
	errs  []error
	mem   [][]byte
	cands []hubCand
	by    hopGroups
}

// NewBind returns inner with the relay path of relay, whose sessions are
// table's. mtu bounds the datagrams to wrap (the router's largest
// datagram).
func NewBind(inner udp.Bind, table SessionTable, relay *Relay, mtu int) *Bind {
	b := &Bind{inner: inner, relay: relay}
	b.sess = keyedSessions{table: table, relay: relay}
	relay.sessions = b.sess
	size := mtu + bhcrypto.TransportOverhead + bhcrypto.PaddingMultiple + bhcrypto.RelayOverhead
	batch := max(inner.BatchSize(), 1)
	b.pool.New = func() any {
		s := &sendScratch{mem: make([][]byte, batch)}
		for i := range s.mem {
			s.mem[i] = make([]byte, size)
		}
		return s
	}
	return b
}

var _ udp.Bind = (*Bind)(nil)

// BatchSize is the inner bind's.
func (b *Bind) BatchSize() int { return b.inner.BatchSize() }

// LocalAddr is the inner bind's.
func (b *Bind) LocalAddr() netip.AddrPort { return b.inner.LocalAddr() }

// Close closes the inner bind.
func (b *Bind) Close() error { return b.inner.Close() }

// wrap copies msg into buf behind a relay header for dst and seals it
// with the hub's session.
func (b *Bind) wrap(buf, msg []byte, kp *bhcrypto.Keypair, dst GatewayID) ([]byte, error) {
	if len(msg)+bhcrypto.RelayOverhead > cap(buf) {
		return nil, errTooBig
	}
	n := copy(buf[bhcrypto.RelayHeaderSize:cap(buf)], msg)
	return b.relay.Wrap(buf[:cap(buf)], n, kp, dst)
}

// Send sends bufs to ep, through a hub when ep is a PseudoEndpoint: as
// flow 0 (handshakes, probes and keepalives have no flow).
func (b *Bind) Send(bufs [][]byte, ep netip.AddrPort) error {
	return b.SendFlows(bufs, nil, ep)
}

// SendFlows sends bufs to ep; through a hub when ep is a PseudoEndpoint,
// each datagram through the hub gateway that ranks first for flows[i]
// (nil: flow 0 for all; see spread.go). It is the router's FlowSender.
func (b *Bind) SendFlows(bufs [][]byte, flows []uint64, ep netip.AddrPort) error {
	dst, pseudo := PseudoGateway(ep)
	if !pseudo {
		return b.inner.Send(bufs, ep)
	}
	if v := b.relay.view.Load(); v != nil {
		b.punch(v, dst)
		if to, ok := b.directTo(v, dst); ok {
			return b.inner.Send(bufs, to)
		}
	}
	s := b.pool.Get().(*sendScratch)
	defer b.put(s)
	s.cands = b.candidates(dst, s.cands)
	if len(s.cands) == 0 {
		return errNoHub
	}
	_, many := b.inner.(manySender)
	var firstErr error
	for len(bufs) > 0 {
		n := min(len(bufs), len(s.mem))
		for i, m := range bufs[:n] {
			h := 0
			if flows != nil && len(s.cands) > 1 {
				h = pickHub(s.cands, flows[i])
			}
			c := &s.cands[h]
			w, err := b.wrap(s.mem[i], m, c.kp, dst)
			if err != nil {
				return err
			}
			c.n++
			c.bytes += uint64(len(m))
			s.bufs, s.eps = append(s.bufs, w), append(s.eps, c.to)
		}
		firstErr = cmpErr(firstErr, b.sendTo(s, many))
		bufs = bufs[n:]
		if flows != nil {
			flows = flows[n:]
		}
	}
	b.noteRelayed(s.cands)
	return firstErr
}

// sendTo sends s.bufs to s.eps grouped by hub gateway (each flow goes
// to one, so its order holds), in one call where the inner bind can,
// else in runs of one endpoint, and empties them.
func (b *Bind) sendTo(s *sendScratch, many bool) error {
	var err error
	s.by.group(s.bufs, s.eps) // flows spread over several hub gateways
	switch {
	case many:
		err = b.inner.(manySender).SendMany(s.bufs, s.eps)
	default:
		for i := 0; i < len(s.bufs); {
			j := i + 1
			for j < len(s.bufs) && s.eps[j] == s.eps[i] {
				j++
			}
			err = cmpErr(err, b.inner.Send(s.bufs[i:j], s.eps[i]))
			i = j
		}
	}
	clear(s.bufs)
	s.bufs, s.eps = s.bufs[:0], s.eps[:0]
	return err
}

func (b *Bind) put(s *sendScratch) {
	clear(s.bufs)
	clear(s.cands)
	s.cands = s.cands[:0]
	s.bufs, s.eps, s.pos = s.bufs[:0], s.eps[:0], s.pos[:0]
	b.pool.Put(s)
}

// SendMany sends bufs[i] to eps[i], wrapping those for pseudo endpoints,
// in one call of the inner bind where it can. It returns the first error
// of any datagram, after trying them all.
func (b *Bind) SendMany(bufs [][]byte, eps []netip.AddrPort) error {
	_, first, err := b.sendMany(bufs, eps, nil)
	return cmpErr(first, err)
}

// SendManyEach is SendMany that reports each datagram, as
// udp.LinuxBind.SendManyEach does: errs[i] is set to nil if bufs[i] went
// out and to why not otherwise, whether the relay path refused it (no
// hub for the pair, errNoHub) or the inner bind did. It returns how many
// were refused; err is an error of the whole call, after which which
// datagrams went out is unknown (the inner bind's call failed, or it
// sends many datagrams at once without saying which it refused). errs
// must be at least as long as bufs. It allocates nothing once its
// scratch has grown to the batch.
func (b *Bind) SendManyEach(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, err error) {
	if len(errs) < len(bufs) {
		return 0, errors.New("transit: SendManyEach: one error slot per datagram")
	}
	if len(eps) != len(bufs) {
		return 0, errors.New("transit: SendManyEach: one endpoint per datagram")
	}
	clear(errs[:len(bufs)])
	failed, _, err = b.sendMany(bufs, eps, errs)
	return failed, err
}

// sendMany is SendMany and SendManyEach. It returns how many datagrams
// were refused, the first refusal, and err, an error of the inner call
// that does not say which datagrams it refused (only with errs; without,
// such an error is first). errs, if not nil, gets each refused
// datagram's error at its position in bufs.
func (b *Bind) sendMany(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, first, err error) {
	ms, many := b.inner.(manySender)
	s := b.pool.Get().(*sendScratch)
	defer b.put(s)
	refused := func(i int, e error) {
		failed++
		first = cmpErr(first, e)
		if errs != nil {
			errs[i] = e
		}
	}
	used := 0
	for i, m := range bufs {
		to := eps[i]
		if dst, pseudo := PseudoGateway(to); pseudo {
			if v := b.relay.view.Load(); v != nil {
				b.punch(v, dst)
				if direct, ok := b.directTo(v, dst); ok {
					to = direct
					goto send
				}
			}
			s.cands = b.candidates(dst, s.cands)
			if len(s.cands) == 0 {
				refused(i, errNoHub)
				continue
			}
			c := &s.cands[pickHub(s.cands, 0)]
			if used == len(s.mem) {
				s.mem = append(s.mem, make([]byte, cap(s.mem[0])))
			}
			w, err := b.wrap(s.mem[used], m, c.kp, dst)
			if err != nil {
				refused(i, err)
				continue
			}
			used++
			c.n++
			c.bytes += uint64(len(m))
			b.noteRelayed(s.cands)
			m, to = w, c.to
		}
	send:
		if !many {
			if err := b.inner.Send([][]byte{m}, to); err != nil {
				refused(i, err)
			}
			continue
		}
		s.bufs, s.eps, s.pos = append(s.bufs, m), append(s.eps, to), append(s.pos, i)
	}
	if !many || len(s.bufs) == 0 {
		return failed, first, nil
	}
	if es, each := b.inner.(eachSender); each && errs != nil {
		for len(s.errs) < len(s.bufs) {
			s.errs = append(s.errs, nil)
		}
		n, e := es.SendManyEach(s.bufs, s.eps, s.errs)
		if e != nil {
			err = e
		} else if n > 0 {
			for j, e := range s.errs[:len(s.bufs)] {
				if e != nil {
					refused(s.pos[j], e)
				}
			}
		}
		clear(s.errs)
		return failed, first, err
	}
	if e := ms.SendMany(s.bufs, s.eps); e != nil {
		if errs != nil {
			err = e // which were refused is not known
		} else {
			first = cmpErr(first, e)
		}
	}
	return failed, first, err
}

func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// Receive reads a batch from the inner bind and returns what the router
// should see of it (see Bind). It may return 0 datagrams. After
// DeferRelay, relay messages come back as they arrived, for Process.
func (b *Bind) Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	// Relay messages are RelayOverhead longer than the router's
	// largest datagram: read into the buffers' whole capacity, and cut
	// anything else to the length the router gave, as the socket would.
	s := &b.rx
	rb := s.whole(bufs)
	n, err := b.inner.Receive(rb, sizes, eps)
	w := b.process(s, bufs, rb, sizes, eps, n, b.deferRelay.Load())
	return w, err
}

// DeferRelay makes Receive hand relay messages back unread, so that the
// receiving goroutine (the router's real-time express loop) spends no
// work on them: its caller passes them to Process on another goroutine.
// The express socket gets relay messages only by the kernel's hash of
// their ports, never by their lane byte, so they are no express traffic.
func (b *Bind) DeferRelay() { b.deferRelay.Store(true) }

// Process does for a batch of n datagrams what Receive does for those it
// read, relay messages included: it returns how many the router should
// see, moved to the front. sizes may exceed len(bufs[i]) up to its
// capacity (a relay message Receive deferred). Any one goroutine at a
// time besides Receive's.
func (b *Bind) Process(bufs [][]byte, sizes []int, eps []netip.AddrPort, n int) int {
	b.deferredMu.Lock()
	defer b.deferredMu.Unlock()
	s := &b.deferred
	return b.process(s, bufs, s.whole(bufs), sizes, eps, n, false)
}

// whole returns bufs at their whole capacity, in s's scratch.
func (s *rxState) whole(bufs [][]byte) [][]byte {
	if cap(s.rbufs) < len(bufs) {
		s.rbufs = make([][]byte, len(bufs))
	}
	rb := s.rbufs[:len(bufs)]
	for i := range bufs {
		rb[i] = bufs[i][:cap(bufs[i])]
	}
	return rb
}

// process handles n datagrams read into rb (bufs at their whole
// capacity) and returns how many the router gets; with deferRelay relay
// messages are kept whole and unread.
func (b *Bind) process(s *rxState, bufs, rb [][]byte, sizes []int, eps []netip.AddrPort, n int, deferRelay bool) int {
	w := 0
	for i := range n {
		msg := rb[i][:sizes[i]]
		keep := true
		switch {
		case len(msg) > 0 && msg[0] == bhcrypto.MsgRelay && deferRelay:
			// Unread: Process will, elsewhere. Its whole length stays.
		case len(msg) > 0 && msg[0] == bhcrypto.MsgRelay:
			keep = b.receiveRelay(s, msg, &sizes[i], &eps[i])
			sizes[i] = min(sizes[i], len(bufs[i]))
		default:
			if v := b.relay.view.Load(); v != nil {
				// Straight from a gateway we reach through a hub,
				// on its session: the router sees it at its pseudo
				// endpoint (direct.go, directFrom).
				if gw, ok := b.directFrom(v, msg, eps[i]); ok {
					eps[i] = PseudoEndpoint(gw)
				}
			}
			sizes[i] = min(sizes[i], len(bufs[i]))
		}
		if keep {
			bufs[w], bufs[i] = bufs[i], bufs[w]
			sizes[w], eps[w] = sizes[i], eps[i]
			w++
		}
	}
	b.flush(s)
	return w
}

// receiveRelay handles one relay message of a batch and reports whether
// the router gets something from it (then in place of msg).
func (b *Bind) receiveRelay(s *rxState, msg []byte, size *int, ep *netip.AddrPort) bool {
	res := b.relay.Receive(msg)
	v := b.relay.view.Load()
	switch res.Reason {
	case Forwarded:
		from := *ep
		s.fwdBufs, s.fwdEps = append(s.fwdBufs, res.Out), append(s.fwdEps, res.To)
		b.hint(s, v, res.From, res.Dst, from, res.To)
		return false
	case ReasonNoSession:
		b.signalNoSession(s, v, res.From, res.Dst)
		return false
	case Control:
		if res.Via == None {
			b.receiveDirect(s, v, res.Origin, res.Inner, *ep)
		} else if isNoSession(res.Inner) {
			if !b.takeNoSession(v, res.Via, res.Origin) {
				b.relay.counts.add(ReasonHintRefused, 0)
			}
		} else if addr, ok := parseHint(res.Inner); ok && b.hintAllowed(v, res.Via, res.Origin, addr) {
			v.setCandidate(res.Origin, addr)
		} else {
			b.relay.counts.add(ReasonHintRefused, 0)
		}
		return false
	case Delivered:
		inner := res.Inner
		if rcv, _, ok := bhcrypto.ParseTransportHeader(inner); ok {
			if _, opened, ok := b.sess.Session(rcv); ok && !b.relay.CheckOrigin(res.Origin, opened) {
				return false
			}
		}
		*size = copy(msg, inner)
		*ep = PseudoEndpoint(res.Origin)
		return true
	}
	return false
}

// flush sends the batch's forwards, grouped by next hop (hopGroups) so
// that the inner bind segments each hop's run (udp.LinuxBind.SendMany:
// one UDP_SEGMENT message per run of equal sizes). They alias the
// batch's buffers, so this runs before Receive returns them.
func (b *Bind) flush(s *rxState) {
	if len(s.fwdBufs) == 0 {
		return
	}
	s.fwdBy.group(s.fwdBufs, s.fwdEps)
	if ms, ok := b.inner.(manySender); ok {
		ms.SendMany(s.fwdBufs, s.fwdEps)
	} else {
		for i := 0; i < len(s.fwdBufs); {
			j := i + 1
			for j < len(s.fwdBufs) && s.fwdEps[j] == s.fwdEps[i] {
				j++
			}
			b.inner.Send(s.fwdBufs[i:j], s.fwdEps[i])
			i = j
		}
	}
	clear(s.fwdBufs)
	s.fwdBufs, s.fwdEps = s.fwdBufs[:0], s.fwdEps[:0]
}

// hopGroups reorders a batch's forwards so that those to one next hop
// are adjacent: hops in the order of their first forward, each hop's
// forwards in the order they came (a flow goes to one hop, so its order
// holds). A hub's batch mixes both directions of its spokes' traffic
// (data one way, acknowledgements the other), which would otherwise cut
// every segmentation run short. Its slices are reused (no allocation in
// the steady state); the zero value is ready.
type hopGroups struct {
	bufs [][]byte
	eps  []netip.AddrPort
	done []bool
}

// group reorders bufs and eps in place. It is O(len × hops), for the
// few hops of one batch: a full batch of 64 forwards costs 1.0 µs over 4
// hops and 7.0 µs (109 ns a forward) over 64, a hub with one forward per
// spoke gateway in a batch (BenchmarkHopGroups, 2-core machine with other
// work running), with no allocation.
func (g *hopGroups) group(bufs [][]byte, eps []netip.AddrPort) {
	i := 1
	for i < len(eps) && eps[i] == eps[i-1] {
		i++
	}
	if i == len(eps) {
		return // one hop
	}
	g.bufs, g.eps = g.bufs[:0], g.eps[:0]
	g.done = append(g.done[:0], make([]bool, len(eps))...)
	for i, ep := range eps {
		if g.done[i] {
			continue
		}
		for j := i; j < len(eps); j++ {
			if !g.done[j] && eps[j] == ep {
				g.bufs, g.eps = append(g.bufs, bufs[j]), append(g.eps, ep)
				g.done[j] = true
			}
		}
	}
	copy(bufs, g.bufs)
	copy(eps, g.eps)
	clear(g.bufs)
}

const (
	errNoHub  = errorString("transit: no hub gateway with a session toward the destination")
	errTooBig = errorString("transit: datagram too large to relay")
)

// WaitReadable waits as the inner bind's WaitReadable does (a real-time
// loop's wait in the kernel, see udp.LinuxBind.WaitReadable) and reports
// true at once when the inner bind cannot wait so. Receive never keeps
// datagrams back between calls, so the inner socket is all there is to
// wait for. keepP is passed on.
func (b *Bind) WaitReadable(timeout time.Duration, keepP bool) (bool, error) {
	w, ok := b.inner.(udp.ReadWaiter)
	if !ok {
		return true, nil
	}
	return w.WaitReadable(timeout, keepP)
}
