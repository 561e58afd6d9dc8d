package udp

import (
	"errors"
	"net/netip"
)

// Bind is the outside of the tunnel: a UDP socket carrying encrypted
// datagrams between gateways.
//
// I/O is batched: Receive fills up to len(bufs) datagrams in one system call
// where the platform allows it, and Send hands a batch destined for one
// endpoint to the kernel in as few calls as possible.
//
// Concurrency: Receive is called from one goroutine at a time; Send may be
// called from several goroutines at once. Close unblocks Receive, which then
// returns ErrClosed.
//
// Ownership: bufs, sizes and eps are borrowed for the duration of the call.
// Receive never allocates per datagram.
type Bind interface {
	// Receive reads up to len(bufs) datagrams (at most BatchSize). Datagram
	// i is written to bufs[i][:sizes[i]] and came from eps[i]. IPv4 sources
	// on a dual-stack socket are reported unmapped (plain IPv4).
	Receive(bufs [][]byte, sizes []int, eps []netip.AddrPort) (n int, err error)
	// Send sends every bufs[i] as one datagram to ep.
	Send(bufs [][]byte, ep netip.AddrPort) error
	// BatchSize is the largest batch Receive returns and Send accepts
	// in one call.
	BatchSize() int
	// LocalAddr is the bound address, with the actual port.
	LocalAddr() netip.AddrPort
	// Close closes the socket. It is safe to call more than once.
	Close() error
}

// ErrClosed is returned by Receive and Send after Close.
var ErrClosed = errors.New("udp: bind closed")
