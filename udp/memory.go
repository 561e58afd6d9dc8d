package udp

import (
	"net/netip"
	"sync"
	"sync/atomic"
)

// memoryQueue is how many datagrams wait for Receive before Send blocks.
const memoryQueue = 1024

// memoryBatch is the BatchSize of a MemoryBind.
const memoryBatch = 64

// datagram is one queued datagram; buf is owned by the receiving bind.
type datagram struct {
	buf  []byte
	from netip.AddrPort
}

// MemoryBind is one end of an in-memory, lossless pair of binds made by
// NewPair, for unit tests of the router. A Send to the other end's address
// queues copies there; a Send to any other address is dropped and counted
// in Dropped, as are datagrams for an end that has been closed.
//
// Ownership: Send copies bufs (into buffers recycled by the receiving end,
// so the steady state does not allocate); Receive copies into bufs. A
// datagram longer than its receive buffer is truncated, as with UDP.
//
// Concurrency: every method is safe for concurrent use. Send blocks while
// 1024 datagrams wait at the other end; Close of either end unblocks it.
// Close unblocks Receive, which then returns ErrClosed.
type MemoryBind struct {
	local netip.AddrPort
	peer  *MemoryBind

	in   chan datagram // datagrams sent to this end
	free chan []byte   // spare buffers for datagrams sent to this end
	done chan struct{} // closed by Close
	once sync.Once

	dropped atomic.Uint64
}

var _ Bind = (*MemoryBind)(nil)

// NewPair returns two connected binds with local addresses a and b.
func NewPair(a, b netip.AddrPort) (*MemoryBind, *MemoryBind) {
	x, y := newMemoryBind(a), newMemoryBind(b)
	x.peer, y.peer = y, x
	return x, y
}

func newMemoryBind(local netip.AddrPort) *MemoryBind {
	return &MemoryBind{
		local: local,
		in:    make(chan datagram, memoryQueue),
		free:  make(chan []byte, memoryQueue),
		done:  make(chan struct{}),
	}
}

// Receive blocks until a datagram is queued, then returns it and every
// further queued one, up to min(len(bufs), len(sizes), len(eps), BatchSize),
// without blocking again.
func (m *MemoryBind) Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (int, error) {
	limit := min(len(bufs), len(sizes), len(eps), memoryBatch)
	if limit == 0 {
		return 0, errNoBuffer
	}
	select {
	case <-m.done:
		return 0, ErrClosed
	default:
	}
	var d datagram
	select {
	case d = <-m.in:
	case <-m.done:
		return 0, ErrClosed
	}
	n := 0
	for {
		sizes[n] = copy(bufs[n], d.buf)
		eps[n] = d.from
		m.recycle(d.buf)
		n++
		if n == limit {
			return n, nil
		}
		select {
		case d = <-m.in:
		default:
			return n, nil
		}
	}
}

// Send delivers a copy of every bufs[i] to the peer if ep is the peer's
// address (an IPv4 address matches its v4-mapped form), and otherwise drops
// them. It returns ErrClosed if this end is closed.
func (m *MemoryBind) Send(bufs [][]byte, ep netip.AddrPort) error {
	select {
	case <-m.done:
		return ErrClosed
	default:
	}
	p := m.peer
	if !sameAddrPort(ep, p.local) {
		m.dropped.Add(uint64(len(bufs)))
		return nil
	}
	for i, b := range bufs {
		select {
		case <-p.done:
			m.dropped.Add(uint64(len(bufs) - i))
			return nil
		default:
		}
		d := datagram{buf: p.copyOf(b), from: m.local}
		select {
		case p.in <- d:
		case <-p.done:
			m.dropped.Add(uint64(len(bufs) - i))
			return nil
		case <-m.done:
			return ErrClosed
		}
	}
	return nil
}

// copyOf returns a copy of b in a recycled buffer when one is big enough.
func (m *MemoryBind) copyOf(b []byte) []byte {
	select {
	case buf := <-m.free:
		if cap(buf) >= len(b) {
			return append(buf[:0], b...)
		}
	default:
	}
	return append(make([]byte, 0, max(len(b), 2048)), b...)
}

// recycle keeps buf for a later copyOf if there is room.
func (m *MemoryBind) recycle(buf []byte) {
	select {
	case m.free <- buf:
	default:
	}
}

func sameAddrPort(a, b netip.AddrPort) bool {
	return a.Port() == b.Port() && a.Addr().Unmap() == b.Addr().Unmap()
}

// Dropped counts datagrams this end sent to an address other than its
// peer's, or to a closed peer.
func (m *MemoryBind) Dropped() uint64 { return m.dropped.Load() }

// BatchSize returns 64.
func (m *MemoryBind) BatchSize() int { return memoryBatch }

// LocalAddr returns the address given to NewPair.
func (m *MemoryBind) LocalAddr() netip.AddrPort { return m.local }

// Close closes this end. It is safe to call more than once and returns nil.
func (m *MemoryBind) Close() error {
	m.once.Do(func() { close(m.done) })
	return nil
}
