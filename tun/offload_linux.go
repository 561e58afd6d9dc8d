//go:build linux

package tun

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// OffloadConfig selects the TUN interface OpenOffload creates.
type OffloadConfig struct {
	// Name is the kernel interface name, for example bh0. Empty lets the
	// kernel pick one (tunN); Offload.Name reports the result. It must be
	// shorter than 16 bytes (IFNAMSIZ).
	Name string
	// MTU is applied to the interface when it is created and reported by
	// Offload.MTU. It must be between 68 and 65535.
	MTU int
}

// OffloadWriteBufferSize is the capacity, counted from offset, that a buffer
// passed to Offload.Write needs for GRO to build the largest super-packet
// (65535 bytes, the IP length limit) in it: cap(bufs[i])-offset >=
// OffloadWriteBufferSize. The extra HeadroomNeeded bytes over 65535 are
// what the library's capacity check reserves for its virtio-net header.
//
// The exact rule: a following packet's payload is merged into the buffer
// while HeadroomNeeded + (IP length of the merged packet) <=
// cap(bufs[i])-offset. With less capacity GRO merges fewer packets; with
// the router's MTU-sized buffers (about offset+MTU+32) not even two
// full-sized packets fit, nothing is merged, and every packet costs one
// write(2) plus the GRO bookkeeping. Capacity beyond OffloadWriteBufferSize is ignored (Write hides it from the
// library, which would otherwise build IP packets longer than 65535 bytes).
const OffloadWriteBufferSize = HeadroomNeeded + maxIPPacket

const (
	// maxIPPacket is the largest IPv4 packet (total length is 16 bits).
	maxIPPacket = 65535
	// minMTU and maxMTU are the kernel's limits for a TUN device.
	minMTU, maxMTU = 68, 65535
	// closeWait bounds how long Close waits for the library's event
	// goroutines to finish.
	closeWait = 5 * time.Second
	// The offloads golang.zx2c4.com/wireguard/tun enables (TUNSETOFFLOAD).
	tcpOffloads = unix.TUN_F_CSUM | unix.TUN_F_TSO4 | unix.TUN_F_TSO6
	udpOffloads = unix.TUN_F_USO4 | unix.TUN_F_USO6
)

// Offload is a Linux TUN device opened with IFF_VNET_HDR through
// golang.zx2c4.com/wireguard/tun, with TCP segmentation and checksum offload
// (TSO4/TSO6/CSUM) and, from Linux 6.2, UDP segmentation offload (USO)
// enabled. The kernel then hands over TCP and UDP super-packets of up to
// 64 KiB in one read(2) and takes them in one write(2):
//
//   - Read splits a super-packet into MTU-sized packets, one per buffer, and
//     fills in their checksums, so a single Read may return up to BatchSize
//     (128) packets. Read copies: the library reads into its own 64 KiB
//     buffer first.
//   - Write coalesces runs of packets of one TCP or UDP flow into
//     super-packets (GRO) before writing them, so the kernel's stack runs
//     once per run instead of once per packet. The merge happens in place,
//     in the spare capacity of the first buffer of each run; see
//     OffloadWriteBufferSize. TCP is merged by this package (tcpmerge.go)
//     and handed over checksum-partial, without verifying the checksums
//     the caller vouches for; UDP by the library, which verifies them.
//
// Without IFF_VNET_HDR support (old kernels) it degrades to one packet per
// system call with BatchSize 1, like Water.
//
// Read and Write may run concurrently with each other, each from one
// goroutine at a time. Close may be called from any goroutine at any time;
// it unblocks a pending Read, which returns ErrClosed.
type Offload struct {
	dev  wgtun.Device
	name string
	mtu  int
	log  *slog.Logger

	closed  atomic.Bool
	drained chan struct{} // closed when the event drain goroutine exits
	dropped atomic.Uint64 // Read results discarded, see Dropped
	warned  atomic.Bool   // a Read error has been logged at Warn

	// Write's state, under wmu: the library's view of the packets it
	// writes (everything but TCP), and the TCP merger.
	wmu   sync.Mutex
	wbufs [][]byte
	merge *tcpMerger
	vnet  bool // the library opened the TUN with virtio-net headers

	waiter *queueWaiter // WaitReadable's; the reading goroutine's
}

var _ Device = (*Offload)(nil)

// OpenOffload creates the TUN interface cfg.Name in the network namespace
// of the calling thread with virtio-net headers and offloads enabled, sets
// its MTU to cfg.MTU and returns it as an *Offload. The interface is left
// down and without addresses. It logs (at Info) which offloads are active,
// or (at Warn) why they are not. If it fails, the caller should fall back
// to OpenWater; the error says why.
//
// Callers of Write must provide, for GRO to coalesce:
//
//   - offset >= HeadroomNeeded (10 bytes for the virtio-net header, which
//     Write writes in front of each packet it sends);
//   - buffers with spare capacity after the packet: cap(bufs[i])-offset
//     up to OffloadWriteBufferSize (65545). Write appends the payload of
//     the following packets of a flow to the first buffer of that flow,
//     within its capacity, and never allocates a bigger one;
//   - runs of packets of one flow in one call: TCP segments in sequence
//     with equal headers and options and only ACK or ACK|PSH flags; UDP
//     datagrams of equal size (the last may be shorter) with the same
//     addresses, ports and IP header fields; valid checksums.
//
// TCP checksums are not verified: Write trusts them and the kernel does
// not check them either, so a caller must only write TCP packets whose
// bytes it can vouch for, as the router can for what a tunnel session's
// AEAD opened (see tcpmerge.go).
//
// Write may modify the packets' headers and checksums, the HeadroomNeeded
// bytes in front of offset and the bytes between len(bufs[i]) and its
// capacity. It leaves the caller's bufs slice itself (the slice headers)
// as it was.
func OpenOffload(cfg OffloadConfig, log *slog.Logger) (Device, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkOffloadConfig(cfg); err != nil {
		return nil, err
	}
	dev, err := wgtun.CreateTUN(cfg.Name, cfg.MTU)
	if err != nil {
		// The caller decides whether to fall back and says so once.
		return nil, fmt.Errorf("offload TUN %q: %w", cfg.Name, err)
	}
	d, err := newOffload(dev, cfg.MTU, log)
	if err != nil {
		return nil, fmt.Errorf("tun: offload open %q: %w", cfg.Name, err)
	}
	d.logOffloads()
	return d, nil
}

// checkOffloadConfig validates cfg before anything is opened: CreateTUN
// leaks its descriptor or its goroutines when it fails after opening
// /dev/net/tun on a bad name or MTU.
func checkOffloadConfig(cfg OffloadConfig) error {
	if len(cfg.Name) >= unix.IFNAMSIZ {
		return fmt.Errorf("tun: interface name %q longer than %d bytes", cfg.Name, unix.IFNAMSIZ-1)
	}
	if cfg.MTU < minMTU || cfg.MTU > maxMTU {
		return fmt.Errorf("tun: MTU %d outside [%d, %d]", cfg.MTU, minMTU, maxMTU)
	}
	return nil
}

// newOffload wraps a library device (one queue of the interface) and
// starts draining its events. It closes dev if it fails.
func newOffload(dev wgtun.Device, mtu int, log *slog.Logger) (*Offload, error) {
	name, err := dev.Name()
	if err != nil {
		_ = dev.Close()
		return nil, fmt.Errorf("name: %w", err)
	}
	d := &Offload{
		dev:     dev,
		name:    name,
		mtu:     mtu,
		log:     log,
		drained: make(chan struct{}),
		wbufs:   make([][]byte, 0, dev.BatchSize()),
		merge:   newTCPMerger(dev.BatchSize()),
		vnet:    dev.BatchSize() > 1,
	}
	// The library's netlink and link-state goroutines block sending on the
	// events channel if nobody reads it; it is closed after Close.
	go d.drainEvents(dev.Events())
	return d, nil
}

// logOffloads says once per interface which offloads are active.
func (d *Offload) logOffloads() {
	log, dev, name := d.log, d.dev, d.name
	if dev.BatchSize() > 1 {
		uso := d.probeUSO()
		log.Info("tun: offload TUN open", "name", name, "mtu", d.mtu,
			"batch", dev.BatchSize(), "tso", true, "csum", true, "uso", uso)
		if !uso {
			log.Warn("tun: kernel lacks UDP segmentation offload (Linux < 6.2); UDP is not batched",
				"name", name)
		}
	} else {
		log.Warn("tun: kernel refused IFF_VNET_HDR; offloads off, one packet per system call",
			"name", name, "mtu", d.mtu)
	}
}

// probeUSO reports whether the kernel accepted the UDP offloads. The
// library keeps that to itself, so repeat its TUNSETOFFLOAD: on success it
// sets the flags that are already set, and the kernel rejects unknown flags
// (EINVAL) before changing anything.
func (d *Offload) probeUSO() bool {
	sc, err := d.dev.File().SyscallConn()
	if err != nil {
		return false
	}
	var ioErr error
	if err := sc.Control(func(fd uintptr) {
		ioErr = unix.IoctlSetInt(int(fd), unix.TUNSETOFFLOAD, tcpOffloads|udpOffloads)
	}); err != nil {
		return false
	}
	return ioErr == nil
}

// drainEvents consumes link events until the library closes the channel,
// which it does once Close has stopped its listeners.
func (d *Offload) drainEvents(events <-chan wgtun.Event) {
	defer close(d.drained)
	for ev := range events {
		if ev&wgtun.EventUp != 0 {
			d.log.Debug("tun: link up", "name", d.name)
		}
		if ev&wgtun.EventDown != 0 {
			d.log.Debug("tun: link down", "name", d.name)
		}
	}
}

// Read reads one packet, or the segments of one super-packet, into bufs and
// returns how many it placed: packet i is at bufs[i][offset:offset+sizes[i]].
// Offer BatchSize buffers with at least MTU bytes after offset each; a
// super-packet with more segments than buffers loses the rest (counted in
// Dropped). Packets the library cannot parse are dropped and Read goes on
// reading. Read blocks until at least one packet is available.
func (d *Offload) Read(bufs [][]byte, sizes []int, offset int) (int, error) {
	if len(bufs) == 0 || len(sizes) == 0 {
		return 0, errNoBuffer
	}
	if len(sizes) < len(bufs) {
		bufs = bufs[:len(sizes)]
	}
	for _, b := range bufs {
		if offset < 0 || offset >= len(b) {
			return 0, errBadOffset
		}
	}
	for {
		if d.closed.Load() {
			return 0, ErrClosed
		}
		n, err := d.dev.Read(bufs, sizes, offset)
		// A segment larger than its buffer was silently cut short by the
		// library: keep only the packets before it.
		for i := range n {
			if offset+sizes[i] > len(bufs[i]) {
				n = i
				d.dropped.Add(1)
				break
			}
		}
		if err == nil {
			if n > 0 {
				return n, nil
			}
			continue
		}
		if d.closed.Load() || errors.Is(err, os.ErrClosed) {
			return 0, ErrClosed
		}
		if pe := (*os.PathError)(nil); errors.As(err, &pe) {
			return 0, err // read(2) itself failed
		}
		// Too many segments for bufs, a malformed virtio header, or the
		// library's netlink listener reporting an error: not fatal.
		d.dropped.Add(1)
		if d.warned.CompareAndSwap(false, true) {
			d.log.Warn("tun: dropped a packet the offload TUN could not deliver (logged once, see Dropped)",
				"name", d.name, "err", err)
		}
		if n > 0 {
			return n, nil
		}
	}
}

// Write writes bufs[i][offset:] as packets, coalescing runs of one flow
// (see OpenOffload for what that needs from the caller). TCP is merged
// here and handed to the kernel checksum-partial, without verifying the
// checksums: the caller vouches for them (tcpmerge.go says why that holds
// for the router); everything else goes through the library, whose GRO
// merges UDP. Packets of one flow keep their order.
//
// It returns len(bufs) when every write succeeded. Every (coalesced)
// packet is tried and the errors are joined, one per failed write, so
// which packets were accepted is unknown: a failed write returns len(bufs)
// (every packet was tried, nothing is left to retry) with the error, or 0
// with ErrClosed or a bad offset. offset must be at least HeadroomNeeded.
func (d *Offload) Write(bufs [][]byte, offset int) (int, error) {
	if offset < HeadroomNeeded {
		return 0, errBadOffset
	}
	for _, b := range bufs {
		if offset >= len(b) {
			return 0, errBadOffset
		}
	}
	if len(bufs) == 0 {
		return 0, nil
	}
	if d.closed.Load() {
		return 0, ErrClosed
	}
	d.wmu.Lock()
	defer d.wmu.Unlock()
	// Hand the library its own slice headers: it reslices and swaps them
	// while merging. Start each buffer HeadroomNeeded bytes before the
	// packet, where the library puts the virtio-net header, and cap it so
	// that no merged packet can exceed 65535 bytes (the library does not
	// check; its capacity test reserves one more header length).
	m, w := d.merge, d.wbufs[:0]
	m.reset()
	for i, b := range bufs {
		if d.vnet {
			if ipLen, tcpLen, v6, ok := tcpHeaders(b[offset:]); ok {
				m.add(bufs, i, offset, ipLen, tcpLen, v6)
				continue
			}
		}
		b = b[offset-HeadroomNeeded:]
		if cap(b) > HeadroomNeeded+OffloadWriteBufferSize {
			b = b[: len(b) : HeadroomNeeded+OffloadWriteBufferSize]
		}
		w = append(w, b)
	}
	d.wbufs = w
	var errs []error // allocated only when a write fails
	f := d.dev.File()
	for i := range m.runs {
		r := &m.runs[i]
		if _, err := f.Write(r.finish(bufs[r.buf], offset)); err != nil {
			errs = append(errs, err)
		}
	}
	if len(w) > 0 {
		if _, err := d.dev.Write(w, HeadroomNeeded); err != nil {
			if j, ok := err.(interface{ Unwrap() []error }); ok {
				errs = append(errs, j.Unwrap()...)
			} else {
				errs = append(errs, err)
			}
		}
	}
	clear(w) // keep no reference to the caller's buffers
	if errs != nil {
		for _, err := range errs {
			if d.closed.Load() || errors.Is(err, os.ErrClosed) || errors.Is(err, unix.EBADFD) {
				return 0, ErrClosed
			}
		}
		return len(bufs), errors.Join(errs...)
	}
	return len(bufs), nil
}

// BatchSize is the library's batch size: 128 with offloads, 1 without.
func (d *Offload) BatchSize() int { return d.dev.BatchSize() }

// MTU returns OffloadConfig.MTU, which OpenOffload applied. Later changes
// made with ip link are not reflected.
func (d *Offload) MTU() int { return d.mtu }

// Name returns the kernel interface name.
func (d *Offload) Name() string { return d.name }

// Dropped counts Read results that were discarded: super-packets with more
// segments than the buffers offered (the remaining segments are lost),
// packets larger than their buffer, and packets with headers the library
// rejected. It counts events, not packets.
func (d *Offload) Dropped() uint64 { return d.dropped.Load() }

// Close closes the device, unblocking a pending Read (which returns
// ErrClosed), and waits for the library's event goroutines to stop. The
// interface disappears unless it is persistent. Only the first call does
// anything; later calls return nil.
func (d *Offload) Close() error {
	if !d.closed.CompareAndSwap(false, true) {
		return nil
	}
	err := d.dev.Close()
	select {
	case <-d.drained:
	case <-time.After(closeWait):
		d.log.Warn("tun: offload TUN event goroutines did not stop", "name", d.name)
	}
	if errors.Is(err, os.ErrClosed) {
		err = nil
	}
	return err
}
