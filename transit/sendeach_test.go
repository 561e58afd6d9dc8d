package transit

import (
	"errors"
	"net/netip"
	"syscall"
	"testing"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// refusingBind is a fakeBind whose kernel refuses datagrams to refuse,
// and says which (SendManyEach, as udp.LinuxBind does), or only that
// some were (SendMany) when each is false.
type refusingBind struct {
	fakeBind
	refuse  netip.AddrPort
	calls   int
	discard bool // send nowhere (for counting allocations)
}

func (r *refusingBind) SendManyEach(bufs [][]byte, eps []netip.AddrPort, errs []error) (int, error) {
	r.calls++
	clear(errs[:len(bufs)])
	failed := 0
	for i := range bufs {
		if eps[i] == r.refuse {
			errs[i] = syscall.EPERM
			failed++
			continue
		}
		if !r.discard {
			r.fakeBind.Send(bufs[i:i+1], eps[i])
		}
	}
	return failed, nil
}

func (r *refusingBind) SendMany(bufs [][]byte, eps []netip.AddrPort) error {
	errs := make([]error, len(bufs))
	if n, _ := r.SendManyEach(bufs, eps, errs); n > 0 {
		return syscall.EPERM
	}
	return nil
}

func (r *refusingBind) Send(bufs [][]byte, ep netip.AddrPort) error {
	if ep == r.refuse {
		return syscall.EPERM
	}
	return r.fakeBind.Send(bufs, ep)
}

// TestSendManyEach: the Bind says which of a batch's datagrams were not
// sent, each at its own position in the batch, whether its own relay
// path refused it (no hub for the pair) or the inner bind did, so that
// the router blames the right gateway for a refused probe. Datagrams to
// pseudo endpoints are wrapped and sent in the same inner call; without
// SendManyEach on the inner bind, one Send each says the same.
func TestSendManyEach(t *testing.T) {
	for _, each := range []bool{true, false} {
		w, net, _ := bindWorld(t)
		inner := &refusingBind{fakeBind: fakeBind{net, addr(gwE1)}, refuse: addr(gwX)}
		var b *Bind
		if each {
			b = NewBind(inner, keyTable{w, gwE1}, w.relay[gwE1], 1420)
		} else {
			b = NewBind(&sendOnly{inner}, keyTable{w, gwE1}, w.relay[gwE1], 1420)
		}
		w.relay[gwE1].SetPlan(w.plan, gwE1)
		buf, n := sealInner(t, w.e2e[0], []byte("probe"))
		datagram := buf[bhcrypto.RelayHeaderSize : bhcrypto.RelayHeaderSize+n]
		bufs := [][]byte{datagram, datagram, []byte("direct to x"), []byte("direct to the hub")}
		eps := []netip.AddrPort{PseudoEndpoint(gwX), PseudoEndpoint(gwE2), addr(gwX), addr(gwHub)}
		errs := make([]error, len(bufs))
		failed, err := b.SendManyEach(bufs, eps, errs)
		if err != nil {
			t.Fatalf("each %v: %v", each, err)
		}
		if failed != 2 || errs[0] == nil || errs[1] != nil || !errors.Is(errs[2], syscall.EPERM) || errs[3] != nil {
			t.Fatalf("each %v: %d failed, errs %v; want 2: no hub to x at 0, EPERM at 2", each, failed, errs)
		}
		if each && inner.calls != 1 {
			t.Errorf("%d inner calls, want 1", inner.calls)
		}
		if q := queued(net, addr(gwHub)) + queued(net, addr(gwHub2)); q != 2 {
			t.Errorf("each %v: the hubs got %d datagrams, want 2 (one relayed, one direct)", each, q)
		}
		if each && !raceEnabled { // the race detector makes sync.Pool allocate
			inner.discard = true
			if a := testing.AllocsPerRun(100, func() { b.SendManyEach(bufs, eps, errs) }); a != 0 {
				t.Errorf("SendManyEach allocates %.1f times per batch", a)
			}
		}
	}
}

// sendOnly hides the inner bind's SendMany and SendManyEach.
type sendOnly struct{ *refusingBind }

func (s *sendOnly) SendMany()     {}
func (s *sendOnly) SendManyEach() {}
