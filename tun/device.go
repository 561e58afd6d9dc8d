package tun

import "errors"

// Device is a layer-3 packet device: the kernel side of the tunnel.
//
// I/O is batched and offset-aware so the data path can write its
// encapsulation header in front of a packet without copying it: Read places
// packet i at bufs[i][offset:offset+sizes[i]], and Write sends
// bufs[i][offset:] as one packet. Backends may use the bytes in front of
// offset (for example for a virtio-net header), so callers must leave at
// least HeadroomNeeded bytes there.
//
// Write may coalesce packets (GRO in the Offload backend): it then merges
// the following packets of a flow into the spare capacity of the flow's
// first buffer, so buffers with capacity beyond the packet batch better.
// See OffloadWriteBufferSize for how much. Such a Write may also rewrite
// packet headers, checksums and the headroom; callers must not expect the
// packets unchanged afterwards. Read may split a super-packet into several
// buffers, so offer BatchSize buffers of at least offset+MTU bytes.
//
// Concurrency: Read and Write may be called concurrently with each other, but
// each of them from one goroutine at a time (per queue, see Queues). Close
// unblocks pending Reads, which then return ErrClosed.
//
// Ownership: bufs are borrowed for the duration of the call only.
type Device interface {
	// Read reads up to len(bufs) packets (at most BatchSize) and returns
	// how many it read. It blocks until at least one packet is available.
	Read(bufs [][]byte, sizes []int, offset int) (n int, err error)
	// Write writes every bufs[i][offset:] as one packet and returns how
	// many packets were accepted. On error, a backend that stops at the
	// first failure returns n < len(bufs): bufs[:n] were written,
	// bufs[n] failed and bufs[n+1:] were not tried, so the caller may
	// skip bufs[n] and write the rest again. A backend that tries every
	// packet whatever fails (Offload) returns n = len(bufs) with the
	// error: nothing is left to retry.
	Write(bufs [][]byte, offset int) (n int, err error)
	// BatchSize is the largest number of packets Read may return at once
	// and the number of bufs a caller should offer.
	BatchSize() int
	// MTU is the device MTU in bytes.
	MTU() int
	// Name is the kernel interface name (for example bh0).
	Name() string
	// Close releases the device. It is safe to call more than once.
	Close() error
}

// HeadroomNeeded is the number of bytes every backend may use in front of
// offset. Callers pass offset >= HeadroomNeeded. It is the size of the
// virtio-net header (struct virtio_net_hdr) that the Offload backend puts
// in front of each packet it writes.
const HeadroomNeeded = 10

// ErrClosed is returned by Read and Write after Close.
var ErrClosed = errors.New("tun: device closed")
