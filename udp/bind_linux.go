//go:build linux

package udp

import (
	"context"
	"errors"
	"fmt"
	"github.com/bridgehead/bridgehead/internal/threadwait"
	"net"
	"net/netip"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Defaults and limits for Options.
const (
	DefaultBatchSize  = 64
	DefaultBufferSize = 4 << 20
	// maxBatch is the kernel's UIO_MAXIOV, the most messages one
	// recvmmsg/sendmmsg call takes.
	maxBatch = 1024
	// maxSendStates bounds the pool of concurrent sendmmsg callers.
	maxSendStates = 8
)

// Options tune a LinuxBind. The zero value selects the defaults.
type Options struct {
	// BatchSize is the most datagrams one Receive returns and one sendmmsg
	// call carries. 0 means DefaultBatchSize; values above 1024 (UIO_MAXIOV)
	// are lowered to 1024.
	BatchSize int
	// RecvBuffer and SendBuffer are the socket buffer sizes in bytes. 0
	// means DefaultBufferSize, a negative value keeps the kernel default.
	// SO_RCVBUFFORCE/SO_SNDBUFFORCE are tried first (they need
	// CAP_NET_ADMIN and ignore net.core.rmem_max/wmem_max); without the
	// capability the plain SO_RCVBUF/SO_SNDBUF, capped by the sysctls, is used.
	RecvBuffer, SendBuffer int
	// DisableOffload turns off UDP segmentation (GSO) on send and
	// coalescing (GRO) on receive, which Listen otherwise enables where
	// the kernel supports them.
	DisableOffload bool

	// reusePort sets SO_REUSEPORT before bind (ListenLanes).
	reusePort bool
	// noGRO leaves receive coalescing off (ListenExpress's express
	// socket: its datagrams are small and read one by one at once).
	noGRO bool
	// now is the clock; nil means time.Now. Tests set it.
	now func() time.Time
}

// LinuxBind is a UDP socket using recvmmsg/sendmmsg, one system call per
// batch. The socket is non-blocking and registered with the Go netpoller
// (it comes from net.ListenConfig), so a Receive waiting for data parks its
// goroutine and Close wakes it.
//
// Offloads: unless Options.DisableOffload is set, Listen enables UDP
// segmentation and receive coalescing where the kernel has them (GSO and
// GRO report the outcome). Send then passes each run of equal-sized
// datagrams of a batch (the last may be shorter; up to 64 datagrams and
// 65507 bytes) as one UDP_SEGMENT message, so the stack runs once per run.
// If the kernel refuses segmentation, that message's datagrams are resent
// plainly; where the device cannot segment (EIO) GSO stays off for the
// bind, where a segment exceeds the path MTU (EMSGSIZE, EINVAL) segments
// that large are sent plainly for a while and then tried again (see
// gsogate_linux.go); nothing is logged. Receive asks the kernel for
// coalesced runs, which arrive in internal 64 KiB buffers (min(BatchSize,
// 64) of them: 4 MiB per bind by default) and are copied out one datagram
// per caller buffer; datagrams that do not fit the caller's buffers wait
// for the next Receive. With GRO a Receive copies every datagram once and
// takes at most 64 messages from the kernel per system call; without it
// the kernel writes straight into the caller's buffers.
//
// Refusals: a datagram the kernel refuses (no route, a prohibit or
// blackhole route, a firewall rule) costs the datagrams after it to the
// same destination, never those to others: SendMany goes on with the
// next destination. SendFailures counts refused datagrams by reason.
//
// Concurrency: Receive calls are serialised by a mutex (one receive scratch
// per bind); callers should still receive from a single goroutine. Send may
// be called from any number of goroutines: up to min(GOMAXPROCS, 8) run
// their system calls in parallel, each with its own preallocated scratch,
// and the rest wait for a free one. Close may be called at any time.
//
// Ownership: Receive and Send borrow bufs (and sizes, eps) only for the
// call; LinuxBind keeps no reference afterwards. Neither allocates in the
// steady state, except that a link-local IPv6 peer with a named zone costs
// an interface lookup per Send.
type LinuxBind struct {
	conn  *net.UDPConn
	raw   syscall.RawConn
	v6    bool
	local netip.AddrPort
	batch int

	closed atomic.Bool

	gro bool // UDP_GRO enabled: Receive goes through groRecv

	// tx is shared by the sendStates: the GSO gate and the refusal
	// counts (atomic; see sendShared).
	tx sendShared

	recvMu  sync.Mutex
	recv    *recvState
	groRecv *groState
	waiter  *threadwait.Poller // WaitReadable's, under recvMu

	sendPool chan *sendState
}

var _ Bind = (*LinuxBind)(nil)

// Listen opens a UDP socket bound to addr (port 0 picks a free port). An
// IPv4 address gives an AF_INET socket. An IPv6 address, including [::],
// gives an AF_INET6 socket with IPV6_V6ONLY off: it also carries IPv4, whose
// peers Receive reports as plain IPv4 and which Send accepts as plain IPv4
// destinations. A v4-mapped address ([::ffff:a.b.c.d]) is treated as IPv4.
// The caller owns the returned bind and must Close it.
func Listen(addr netip.AddrPort, opts Options) (*LinuxBind, error) {
	if !addr.IsValid() {
		return nil, errors.New("udp: invalid listen address")
	}
	batch := opts.BatchSize
	switch {
	case batch < 0:
		return nil, fmt.Errorf("udp: negative BatchSize %d", batch)
	case batch == 0:
		batch = DefaultBatchSize
	case batch > maxBatch:
		batch = maxBatch
	}
	ip := addr.Addr()
	v6 := ip.Is6() && !ip.Is4In6()
	network := "udp4"
	if v6 {
		network = "udp6"
	} else {
		addr = netip.AddrPortFrom(ip.Unmap(), addr.Port())
	}

	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		cerr := c.Control(func(fd uintptr) { err = setupSocket(int(fd), v6, opts) })
		return errors.Join(cerr, err)
	}}
	pc, err := lc.ListenPacket(context.Background(), network, addr.String())
	if err != nil {
		return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
	}
	conn, ok := pc.(*net.UDPConn)
	if !ok {
		_ = pc.Close()
		return nil, fmt.Errorf("udp: listen %v: got a %T", addr, pc)
	}
	raw, err := conn.SyscallConn()
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
	}
	local, err := netip.ParseAddrPort(conn.LocalAddr().String())
	if err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("udp: listen %v: local address: %w", addr, err)
	}
	if !v6 {
		local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	}
	var gso, gro bool
	if !opts.DisableOffload {
		if err := raw.Control(func(fd uintptr) { gso, gro = probeOffloads(int(fd), !opts.noGRO) }); err != nil {
			_ = conn.Close()
			return nil, fmt.Errorf("udp: listen %v: %w", addr, err)
		}
	}

	b := &LinuxBind{
		conn:     conn,
		raw:      raw,
		v6:       v6,
		local:    local,
		batch:    batch,
		gro:      gro,
		waiter:   threadwait.New(),
		sendPool: make(chan *sendState, maxSendStates),
	}
	b.tx.gso.on.Store(gso)
	b.tx.gso.now, b.tx.gso.local = opts.now, local
	if b.tx.gso.now == nil {
		b.tx.gso.now = time.Now
	}
	if gro {
		b.groRecv = newGROState(batch)
	} else {
		b.recv = newRecvState(batch)
	}
	for range min(runtime.GOMAXPROCS(0), maxSendStates) {
		b.sendPool <- newSendState(batch, &b.tx)
	}
	return b, nil
}

// setupSocket runs before bind: it enables dual-stack on IPv6 sockets and
// sizes the buffers.
func setupSocket(fd int, v6 bool, opts Options) error {
	if v6 {
		if err := unix.SetsockoptInt(fd, unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, 0); err != nil {
			return fmt.Errorf("udp: clear IPV6_V6ONLY: %w", err)
		}
	}
	if opts.reusePort {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			return fmt.Errorf("udp: SO_REUSEPORT: %w", err)
		}
	}
	if err := setBuffer(fd, opts.RecvBuffer, unix.SO_RCVBUFFORCE, unix.SO_RCVBUF); err != nil {
		return fmt.Errorf("udp: receive buffer: %w", err)
	}
	if err := setBuffer(fd, opts.SendBuffer, unix.SO_SNDBUFFORCE, unix.SO_SNDBUF); err != nil {
		return fmt.Errorf("udp: send buffer: %w", err)
	}
	return nil
}

// setBuffer sets a socket buffer, preferring the privileged option.
func setBuffer(fd, size, force, plain int) error {
	if size < 0 {
		return nil
	}
	if size == 0 {
		size = DefaultBufferSize
	}
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, force, size) == nil {
		return nil
	}
	return unix.SetsockoptInt(fd, unix.SOL_SOCKET, plain, size)
}

// Receive blocks until at least one datagram arrives, then returns as many
// as are queued, up to min(len(bufs), len(sizes), len(eps), BatchSize).
// Datagram i is in bufs[i][:sizes[i]] (truncated if longer than
// len(bufs[i])) and came from eps[i]. With GRO, datagrams left over from
// the previous call are returned first, without waiting.
func (b *LinuxBind) Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	n := min(len(bufs), len(sizes), len(eps), b.batch)
	if n == 0 {
		return 0, errNoBuffer
	}
	b.recvMu.Lock()
	defer b.recvMu.Unlock()
	if b.closed.Load() {
		return 0, ErrClosed
	}
	if b.gro {
		return b.receiveGRO(bufs[:n], sizes, eps)
	}
	s := b.recv
	s.prepare(bufs, n)
	err := b.raw.Read(s.fn)
	got := s.finish(sizes, eps)
	if err != nil {
		return 0, b.mapErr(err)
	}
	if s.err != nil {
		return 0, b.mapErr(s.err)
	}
	return got, nil
}

// receiveGRO is Receive for a bind with UDP_GRO: it receives into the
// internal buffers when nothing is pending and splits into bufs.
func (b *LinuxBind) receiveGRO(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	s := b.groRecv
	if !s.pending() {
		s.prepare(len(bufs))
		if err := b.raw.Read(s.fn); err != nil {
			return 0, b.mapErr(err)
		}
		if s.err != nil {
			return 0, b.mapErr(s.err)
		}
		s.parse()
	}
	return s.split(bufs, sizes, eps), nil
}

// mapErr reports errors caused by Close as ErrClosed.
func (b *LinuxBind) mapErr(err error) error {
	if b.closed.Load() || errors.Is(err, net.ErrClosed) {
		return ErrClosed
	}
	return err
}

// GSO reports whether Send uses UDP segmentation. It turns false for good
// when the kernel cannot segment (EIO, EOPNOTSUPP, ENOPROTOOPT); a segment
// size the path refuses only caps segments for a while and leaves it true.
func (b *LinuxBind) GSO() bool { return b.tx.gso.on.Load() }

// GRO reports whether the socket receives coalesced datagrams (UDP_GRO).
func (b *LinuxBind) GRO() bool { return b.gro }

// BatchSize returns Options.BatchSize after defaults.
func (b *LinuxBind) BatchSize() int { return b.batch }

// LocalAddr returns the bound address and port ([::]:port for a dual-stack
// wildcard socket).
func (b *LinuxBind) LocalAddr() netip.AddrPort { return b.local }

// SyscallConn gives access to the socket, for attaching a socket filter
// (package earlydrop). It implements syscall.Conn.
func (b *LinuxBind) SyscallConn() (syscall.RawConn, error) { return b.conn.SyscallConn() }

// Close closes the socket, waking a blocked Receive and any Send waiting
// for buffer space; they return ErrClosed. Only the first call does
// anything; later calls return nil.
func (b *LinuxBind) Close() error {
	if !b.closed.CompareAndSwap(false, true) {
		return nil
	}
	return b.conn.Close()
}
