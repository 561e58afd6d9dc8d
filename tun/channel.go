package tun

import (
	"io"
	"sync"
)

// DefaultChannelBatch is the BatchSize of a Channel made by NewChannel.
const DefaultChannelBatch = 16

// channelQueue is the capacity of each Channel queue, in packets.
const channelQueue = 1024

// Channel is an in-memory Device for tests. Packets given to Inject come out
// of Read as if the kernel had routed them into the tunnel; packets passed to
// Write come out of Outbound as if the kernel had received them.
//
// Ownership: Inject copies its argument. Read copies queued packets into the
// caller's buffers. Write copies each packet; the copy received from
// Outbound belongs to the receiver, who may hand it back with Release so the
// next Write can reuse it (then steady-state Inject/Read/Write do not
// allocate).
//
// Concurrency: every method is safe for concurrent use. Inject blocks while
// 1024 packets wait to be read, Write blocks while 1024 packets wait in
// Outbound; Close unblocks both, and Read, which then return ErrClosed.
type Channel struct {
	name  string
	mtu   int
	batch int

	in   chan []byte   // injected copies waiting for Read
	out  chan []byte   // written copies waiting for the test
	free chan []byte   // spare buffers for Inject and Write
	done chan struct{} // closed by Close
	once sync.Once
}

var _ Device = (*Channel)(nil)

// NewChannel returns an open Channel with BatchSize DefaultChannelBatch.
func NewChannel(name string, mtu int) *Channel {
	return NewChannelBatch(name, mtu, DefaultChannelBatch)
}

// NewChannelBatch returns an open Channel whose Read returns up to batch
// packets at once. batch < 1 is treated as 1.
func NewChannelBatch(name string, mtu, batch int) *Channel {
	if batch < 1 {
		batch = 1
	}
	return &Channel{
		name:  name,
		mtu:   mtu,
		batch: batch,
		in:    make(chan []byte, channelQueue),
		out:   make(chan []byte, channelQueue),
		free:  make(chan []byte, 2*channelQueue),
		done:  make(chan struct{}),
	}
}

// Inject queues a copy of pkt for a later Read. It blocks while the queue is
// full and returns ErrClosed if the Channel is (or gets) closed.
func (c *Channel) Inject(pkt []byte) error {
	cp := c.copyOf(pkt)
	select {
	case <-c.done:
		return ErrClosed
	default:
	}
	select {
	case c.in <- cp:
		return nil
	case <-c.done:
		return ErrClosed
	}
}

// Outbound returns the packets written with Write, in order. The channel is
// never closed; select on it together with a timeout or test context.
func (c *Channel) Outbound() <-chan []byte { return c.out }

// Release hands a packet received from Outbound back for reuse. The caller
// must not touch pkt afterwards. Releasing is optional.
func (c *Channel) Release(pkt []byte) {
	select {
	case c.free <- pkt[:0]:
	default:
	}
}

// Read blocks until a packet is queued, then copies it and every further
// queued packet (up to len(bufs), len(sizes) and BatchSize, without blocking
// again) to bufs[i][offset:]. A packet that does not fit its buffer is
// dropped and Read returns the packets before it with io.ErrShortBuffer.
func (c *Channel) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	limit := min(len(bufs), len(sizes), c.batch)
	if limit == 0 {
		return 0, errNoBuffer
	}
	if offset < 0 {
		return 0, errBadOffset
	}
	select {
	case <-c.done:
		return 0, ErrClosed
	default:
	}
	var pkt []byte
	select {
	case pkt = <-c.in:
	case <-c.done:
		return 0, ErrClosed
	}
	n := 0
	for {
		if offset > len(bufs[n]) || len(pkt) > len(bufs[n])-offset {
			c.Release(pkt)
			return n, io.ErrShortBuffer
		}
		sizes[n] = copy(bufs[n][offset:], pkt)
		c.Release(pkt)
		n++
		if n == limit {
			return n, nil
		}
		select {
		case pkt = <-c.in:
		default:
			return n, nil
		}
	}
}

// Write copies every bufs[i][offset:] to Outbound. It blocks while Outbound
// is full and returns ErrClosed, with the count written so far, once the
// Channel is closed.
func (c *Channel) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			return i, errBadOffset
		}
		select {
		case <-c.done:
			return i, ErrClosed
		default:
		}
		cp := c.copyOf(b[offset:])
		select {
		case c.out <- cp:
		case <-c.done:
			return i, ErrClosed
		}
	}
	return len(bufs), nil
}

// copyOf returns a copy of p, reusing a released buffer when one is big
// enough.
func (c *Channel) copyOf(p []byte) []byte {
	select {
	case b := <-c.free:
		if cap(b) >= len(p) {
			return append(b[:0], p...)
		}
	default:
	}
	return append(make([]byte, 0, max(len(p), c.mtu)), p...)
}

// BatchSize returns the batch given to NewChannelBatch.
func (c *Channel) BatchSize() int { return c.batch }

// MTU returns the MTU given to the constructor.
func (c *Channel) MTU() int { return c.mtu }

// Name returns the name given to the constructor.
func (c *Channel) Name() string { return c.name }

// Close unblocks pending Read, Write and Inject calls. Packets still queued
// are discarded. It is safe to call more than once and always returns nil.
func (c *Channel) Close() error {
	c.once.Do(func() { close(c.done) })
	return nil
}
