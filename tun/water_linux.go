//go:build linux

package tun

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"time"

	"github.com/songgao/water"
)

// WaterConfig selects the TUN interface OpenWater creates or attaches to.
type WaterConfig struct {
	// Name is the kernel interface name, for example bh0. Empty lets the
	// kernel pick one (tunN); Water.Name reports the result.
	Name string
	// MTU is reported by Water.MTU. OpenWater does not apply it: link
	// configuration (addresses, MTU, up/down) belongs to the netlink code.
	MTU int
	// MultiQueue opens the interface with IFF_MULTI_QUEUE so that further
	// queues can be attached with Water.OpenQueue.
	MultiQueue bool
}

// Water is a Linux TUN device (IFF_TUN|IFF_NO_PI) opened through
// github.com/songgao/water. It is the portable backend: the kernel hands over
// one packet per read(2) and takes one per write(2), so BatchSize is 1 and
// Write issues one system call per packet. Read copies nothing in user space:
// the kernel writes the packet straight into bufs[0][offset:]. Water does not
// use the headroom in front of offset.
//
// Each Water is one queue of the interface. Read and Write may run
// concurrently with each other, each from one goroutine at a time. Close may
// be called from any goroutine at any time; it unblocks a pending Read, which
// returns ErrClosed. The file descriptor is registered with the Go runtime
// poller, so a blocked Read parks a goroutine, not an OS thread.
type Water struct {
	ifce   *water.Interface
	file   *os.File
	cfg    WaterConfig
	name   string
	closed atomic.Bool
	waiter *queueWaiter // WaitReadable's; the reading goroutine's
}

var _ Device = (*Water)(nil)

var (
	errNotMultiQueue = errors.New("tun: OpenQueue needs WaterConfig.MultiQueue")
	errNotPollable   = errors.New("tun: water returned a descriptor the Go poller cannot wait on; Close would not unblock Read")
)

// OpenWater creates (or, for a persistent or multi-queue interface, attaches
// to) the TUN interface cfg.Name and returns its first queue. The interface
// is left as the kernel creates it: down, with no addresses. The caller owns
// the returned Water and must Close it.
func OpenWater(cfg WaterConfig) (*Water, error) {
	if cfg.MTU < 0 {
		return nil, fmt.Errorf("tun: negative MTU %d", cfg.MTU)
	}
	ifce, err := water.New(water.Config{
		DeviceType: water.TUN,
		PlatformSpecificParams: water.PlatformSpecificParams{
			Name:       cfg.Name,
			MultiQueue: cfg.MultiQueue,
		},
	})
	if err != nil {
		return nil, fmt.Errorf("tun: open %q: %w", cfg.Name, err)
	}
	file, ok := ifce.ReadWriteCloser.(*os.File)
	if !ok {
		_ = ifce.Close()
		return nil, fmt.Errorf("tun: water returned %T, want *os.File", ifce.ReadWriteCloser)
	}
	// water opens /dev/net/tun with O_NONBLOCK and wraps it with os.NewFile,
	// which registers it with the poller. Check rather than assume: deadlines
	// are only supported on pollable files. (Do not call file.Fd here: it
	// would switch the descriptor back to blocking mode.)
	if err := file.SetReadDeadline(time.Time{}); err != nil {
		_ = file.Close()
		return nil, fmt.Errorf("%w: %v", errNotPollable, err)
	}
	return &Water{ifce: ifce, file: file, cfg: cfg, name: ifce.Name()}, nil
}

// OpenQueue attaches another queue to the same multi-queue interface. The new
// queue is independent: it has its own Read/Write goroutine rules and must be
// closed separately. The kernel spreads flows across queues.
func (w *Water) OpenQueue() (*Water, error) {
	if !w.cfg.MultiQueue {
		return nil, errNotMultiQueue
	}
	if w.closed.Load() {
		return nil, ErrClosed
	}
	cfg := w.cfg
	cfg.Name = w.name
	return OpenWater(cfg)
}

// OpenWaterQueues is OpenWater for n queues of one IFF_MULTI_QUEUE
// interface (cfg.MultiQueue is implied): the portable backend's lanes.
// The kernel spreads the packets it routes into the interface over the
// queues by flow, as for OpenOffloadQueues. On error nothing stays open.
func OpenWaterQueues(cfg WaterConfig, n int) ([]Device, error) {
	if n < 1 || n > MaxQueues {
		return nil, fmt.Errorf("tun: %d queues outside [1, %d]", n, MaxQueues)
	}
	cfg.MultiQueue = true
	first, err := OpenWater(cfg)
	if err != nil {
		return nil, err
	}
	devs := []Device{first}
	for i := 1; i < n; i++ {
		q, err := first.OpenQueue()
		if err != nil {
			for _, d := range devs {
				_ = d.Close()
			}
			return nil, fmt.Errorf("tun: multi-queue TUN %q: queue %d: %w", first.Name(), i, err)
		}
		devs = append(devs, q)
	}
	return devs, nil
}

// Read reads one packet into bufs[0][offset:] and sets sizes[0]. It returns
// n == 1 on success. A packet longer than the buffer is truncated by the
// kernel, so callers should offer at least MTU bytes after offset.
func (w *Water) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 || len(sizes) == 0 {
		return 0, errNoBuffer
	}
	if offset < 0 || offset >= len(bufs[0]) {
		return 0, errBadOffset
	}
	n, err := w.file.Read(bufs[0][offset:])
	if err != nil {
		return 0, w.mapErr(err)
	}
	sizes[0] = n
	return 1, nil
}

// Write writes each bufs[i][offset:] as one packet, one write(2) each. It
// stops at the first error and returns the number of packets written before
// it; the kernel rejects malformed packets (EINVAL) one at a time, so a
// caller may skip bufs[n] and retry the rest.
func (w *Water) Write(bufs [][]byte, offset int) (int, error) {
	for i, b := range bufs {
		if offset < 0 || offset > len(b) {
			return i, errBadOffset
		}
		if _, err := w.file.Write(b[offset:]); err != nil {
			return i, w.mapErr(err)
		}
	}
	return len(bufs), nil
}

// mapErr turns the poller's "file already closed" into ErrClosed.
func (w *Water) mapErr(err error) error {
	if errors.Is(err, os.ErrClosed) || w.closed.Load() {
		return ErrClosed
	}
	return err
}

// BatchSize is 1: water moves one packet per system call.
func (w *Water) BatchSize() int { return 1 }

// MTU returns WaterConfig.MTU. It is not read back from the kernel.
func (w *Water) MTU() int { return w.cfg.MTU }

// Name returns the kernel interface name.
func (w *Water) Name() string { return w.name }

// Close closes this queue's descriptor and unblocks a pending Read. The
// interface disappears when its last queue is closed (unless persistent).
// Only the first call does anything; later calls return nil.
func (w *Water) Close() error {
	if !w.closed.CompareAndSwap(false, true) {
		return nil
	}
	return w.ifce.Close()
}
