package netsetup

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"syscall"

	"github.com/vishvananda/netlink/nl"
	"golang.org/x/sys/unix"
)

// routeBatchSize is how many route requests go into one datagram. Each
// is ~60 bytes and its answer, an ACK, ~36 (NETLINK_CAP_ACK), so a batch
// stays far below the socket buffers.
const routeBatchSize = 256

// routeSocket installs tunnel routes in batches: many RTM_NEWROUTE
// requests per sendto and their ACKs read together, instead of one round
// trip per route (vishvananda/netlink's RouteReplace). Start-up of a
// catalog of 100k prefixes spent most of its time in those round trips.
// The kernel still handles each request on its own, with its own answer,
// so one bad route fails alone. It is bound to the network namespace of
// the thread that opened it; Setup's mutex serializes its use.
type routeSocket struct {
	fd  int
	buf []byte
}

func openRouteSocket() (*routeSocket, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_ROUTE)
	if err != nil {
		return nil, fmt.Errorf("netlink socket: %w", err)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("netlink bind: %w", err)
	}
	// Error answers without a copy of the request (smaller, and the
	// sequence number is all that is needed to match them).
	_ = unix.SetsockoptInt(fd, unix.SOL_NETLINK, unix.NETLINK_CAP_ACK, 1)
	return &routeSocket{fd: fd, buf: make([]byte, 1<<16)}, nil
}

func (s *routeSocket) close() error { return unix.Close(s.fd) }

// replaceTunnel does RouteReplace of "p dev link scope link" for every
// prefix and returns one error (or nil) per prefix, in order.
func (s *routeSocket) replaceTunnel(link int, ps []netip.Prefix) []error {
	errs := make([]error, len(ps))
	for start := 0; start < len(ps); start += routeBatchSize {
		end := min(start+routeBatchSize, len(ps))
		if err := s.batch(link, ps[start:end], errs[start:end]); err != nil {
			for i := start; i < end; i++ {
				if errs[i] == nil {
					errs[i] = err
				}
			}
		}
	}
	return errs
}

// batch sends one datagram of requests and reads every answer. errs[i]
// gets the kernel's answer to ps[i]; the returned error is a failure of
// the exchange itself (those without an answer get it).
func (s *routeSocket) batch(link int, ps []netip.Prefix, errs []error) error {
	var msg []byte
	seqs := make(map[uint32]int, len(ps))
	for i, p := range ps {
		req := nl.NewNetlinkRequest(unix.RTM_NEWROUTE, unix.NLM_F_CREATE|unix.NLM_F_REPLACE|unix.NLM_F_ACK)
		rt := nl.NewRtMsg()
		rt.Scope = unix.RT_SCOPE_LINK
		rt.Dst_len = uint8(p.Bits())
		rt.Family = unix.AF_INET6
		if p.Addr().Is4() {
			rt.Family = unix.AF_INET
		}
		req.AddData(rt)
		req.AddData(nl.NewRtAttr(unix.RTA_DST, p.Addr().AsSlice()))
		oif := make([]byte, 4)
		binary.NativeEndian.PutUint32(oif, uint32(link))
		req.AddData(nl.NewRtAttr(unix.RTA_OIF, oif))
		seqs[req.Seq] = i
		msg = append(msg, req.Serialize()...)
	}
	if err := unix.Sendto(s.fd, msg, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return fmt.Errorf("netlink send: %w", err)
	}
	for left := len(ps); left > 0; {
		n, _, err := unix.Recvfrom(s.fd, s.buf, 0)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return fmt.Errorf("netlink receive: %w", err)
		}
		msgs, err := syscall.ParseNetlinkMessage(s.buf[:n])
		if err != nil {
			return fmt.Errorf("netlink answer: %w", err)
		}
		for _, m := range msgs {
			i, ok := seqs[m.Header.Seq]
			if !ok || m.Header.Type != unix.NLMSG_ERROR || len(m.Data) < 4 {
				continue // not an answer to this batch
			}
			delete(seqs, m.Header.Seq)
			left--
			if code := int32(binary.NativeEndian.Uint32(m.Data[:4])); code != 0 {
				errs[i] = syscall.Errno(-code)
			}
		}
	}
	return nil
}
