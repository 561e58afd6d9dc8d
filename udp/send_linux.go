//go:build linux

package udp

import (
	"errors"
	"net/netip"
	"os"

	"golang.org/x/sys/unix"
)

// Send sends every bufs[i] as one datagram to ep, BatchSize datagrams per
// sendmmsg call (with GSO, runs of equal-sized datagrams in one message
// each), waiting while the socket buffer is full. If the kernel refuses a
// datagram (the route or a firewall rule refuses ep), the rest are not
// sent either and Send returns that error; SendFailures counts them all.
func (b *LinuxBind) Send(bufs [][]byte, ep netip.AddrPort) error {
	if len(bufs) == 0 {
		return nil
	}
	if b.closed.Load() {
		return ErrClosed
	}
	s := <-b.sendPool
	defer func() { s.dst = netip.AddrPort{}; b.sendPool <- s }()
	namelen, err := encodeSockaddr(&s.name, ep, b.v6)
	if err != nil {
		return err
	}
	s.dst = ep
	for len(bufs) > 0 {
		chunk := bufs[:min(len(bufs), b.batch)]
		bufs = bufs[len(chunk):]
		s.prepare(chunk, namelen, nil)
		err := b.raw.Write(s.fn)
		s.release()
		if err != nil {
			return b.mapErr(err)
		}
		if s.err != nil {
			return b.mapErr(s.err)
		}
		if s.firstErr != 0 {
			// The rest of bufs goes to the same refused destination.
			b.tx.fails[sendReason(s.firstErr)].Add(uint64(len(bufs)))
			return os.NewSyscallError("sendmmsg", s.firstErr)
		}
	}
	return nil
}

// SendMany sends bufs[i] to eps[i], BatchSize datagrams per sendmmsg
// call. With GSO, each run of consecutive datagrams to one endpoint is
// segmented as Send segments its batch (equal sizes, the last may be
// shorter, one lane byte): a hub's forwards, grouped by next hop, reach
// the stack once per run. Datagrams to different endpoints are messages
// of their own, so the router's health probes, one small datagram to
// each of many gateways, still go out in one system call. An endpoint
// the socket cannot reach (another address family) fails the whole call
// before anything is sent. A datagram the kernel refuses costs the
// datagrams right after it to the same endpoint (they are not tried),
// not the others: SendMany goes on with the next endpoint and returns
// the first refusal's error once everything else was sent. SendManyEach
// says which datagrams were refused.
func (b *LinuxBind) SendMany(bufs [][]byte, eps []netip.AddrPort) error {
	_, first, err := b.sendMany(bufs, eps, nil)
	if err == nil && first != 0 {
		err = os.NewSyscallError("sendmmsg", first)
	}
	return err
}

// SendManyEach is SendMany that reports each datagram: errs[i] is set to
// nil if bufs[i] went out and to the error (a unix.Errno) the kernel
// refused it, or the datagram before it to the same endpoint, with. It
// returns how many were refused; err is an error of the whole call
// (ErrClosed, mismatched lengths, an endpoint of the wrong family), with
// nothing sent, or a system call failure that stopped it. errs must be
// at least as long as bufs. It allocates nothing.
func (b *LinuxBind) SendManyEach(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, err error) {
	if len(errs) < len(bufs) {
		return 0, errors.New("udp: SendManyEach: one error slot per datagram")
	}
	clear(errs[:len(bufs)])
	failed, _, err = b.sendMany(bufs, eps, errs)
	return failed, err
}

// sendMany is SendMany and SendManyEach: it returns how many datagrams
// were refused, the first refusal (0 if none) and the error of the call;
// errs, if not nil, gets each refused datagram's error.
func (b *LinuxBind) sendMany(bufs [][]byte, eps []netip.AddrPort, errs []error) (failed int, first unix.Errno, err error) {
	if len(bufs) != len(eps) {
		return 0, 0, errors.New("udp: SendMany: one endpoint per datagram")
	}
	if len(bufs) == 0 {
		return 0, 0, nil
	}
	if b.closed.Load() {
		return 0, 0, ErrClosed
	}
	s := <-b.sendPool
	defer func() { b.sendPool <- s }()
	for i := range eps {
		if i > 0 && eps[i] == eps[i-1] {
			continue
		}
		if _, err := encodeSockaddr(&s.names[0], eps[i], b.v6); err != nil {
			return 0, 0, err
		}
	}
	for len(bufs) > 0 {
		k := min(len(bufs), b.batch)
		for i := range k {
			if i > 0 && eps[i] == eps[i-1] {
				s.nlens[i] = s.nlens[i-1]
				s.names[i] = s.names[i-1]
				continue
			}
			s.nlens[i], _ = encodeSockaddr(&s.names[i], eps[i], b.v6)
		}
		var chunkErrs []error
		if errs != nil {
			chunkErrs = errs[:k]
			errs = errs[k:]
		}
		s.prepareMany(bufs[:k], eps[:k], chunkErrs)
		err := b.raw.Write(s.fn)
		if first == 0 {
			first = s.firstErr
		}
		failed += s.failed
		s.releaseMany()
		if err != nil {
			return failed, first, b.mapErr(err)
		}
		if s.err != nil {
			return failed, first, b.mapErr(s.err)
		}
		bufs, eps = bufs[k:], eps[k:]
	}
	return failed, first, nil
}
