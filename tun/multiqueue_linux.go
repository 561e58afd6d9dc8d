//go:build linux

package tun

import (
	"fmt"
	"log/slog"
	"os"

	"golang.org/x/sys/unix"
	wgtun "golang.zx2c4.com/wireguard/tun"
)

// MaxQueues is the most queues OpenOffloadQueues opens. The kernel allows
// 256 (MAX_TAP_QUEUES); the router's lanes stop at 64.
const MaxQueues = 64

const cloneDevice = "/dev/net/tun"

// OpenOffloadQueues creates the TUN interface cfg.Name with IFF_MULTI_QUEUE
// and opens n queues of it, each an *Offload with the same offloads and
// batch interface as OpenOffload's. The kernel spreads the packets it
// routes into the interface over the queues by flow (the skb's flow hash,
// or the receive queue it came in on), so each flow arrives on one queue
// and in order; a packet written to any queue enters the stack the same
// way.
//
// golang.zx2c4.com/wireguard/tun opens single-queue devices only, so the
// queues are opened here (open, TUNSETIFF with IFF_MULTI_QUEUE, non-
// blocking) and handed to the library: the first as a monitored device
// (it sets the MTU and watches the link), the others unmonitored. Each
// queue is independent: its own Read and Write goroutines, closed
// separately; the interface goes away with its last queue. The interface
// is left down and without addresses. On error nothing stays open.
func OpenOffloadQueues(cfg OffloadConfig, n int, log *slog.Logger) ([]Device, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := checkOffloadConfig(cfg); err != nil {
		return nil, err
	}
	if n < 1 || n > MaxQueues {
		return nil, fmt.Errorf("tun: %d queues outside [1, %d]", n, MaxQueues)
	}
	devs := make([]Device, 0, n)
	fail := func(err error) ([]Device, error) {
		for _, d := range devs {
			_ = d.Close()
		}
		return nil, fmt.Errorf("tun: multi-queue TUN %q: %w", cfg.Name, err)
	}
	name := cfg.Name
	for i := range n {
		fd, err := openQueue(name)
		if err != nil {
			return fail(fmt.Errorf("queue %d: %w", i, err))
		}
		var dev wgtun.Device
		if i == 0 {
			// Registered with the poller as the library's CreateTUN does:
			// non-blocking before os.NewFile.
			f := os.NewFile(uintptr(fd), cloneDevice)
			if dev, err = wgtun.CreateTUNFromFile(f, cfg.MTU); err != nil {
				_ = f.Close()
			}
		} else if dev, _, err = wgtun.CreateUnmonitoredTUNFromFD(fd); err != nil {
			_ = unix.Close(fd)
		}
		if err != nil {
			return fail(fmt.Errorf("queue %d: %w", i, err))
		}
		d, err := newOffload(dev, cfg.MTU, log)
		if err != nil {
			return fail(fmt.Errorf("queue %d: %w", i, err))
		}
		devs = append(devs, d)
		name = d.name // the kernel's choice when cfg.Name was empty
	}
	devs[0].(*Offload).logOffloads()
	if n > 1 {
		log.Info("tun: multi-queue TUN open", "name", name, "queues", n)
	}
	return devs, nil
}

// openQueue opens one queue of the multi-queue interface name (creating
// it if it does not exist yet) with virtio-net headers, non-blocking, and
// returns its descriptor.
func openQueue(name string) (int, error) {
	fd, err := unix.Open(cloneDevice, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	ifr, err := unix.NewIfreq(name)
	if err == nil {
		ifr.SetUint16(unix.IFF_TUN | unix.IFF_NO_PI | unix.IFF_VNET_HDR | unix.IFF_MULTI_QUEUE)
		if err = unix.IoctlIfreq(fd, unix.TUNSETIFF, ifr); err != nil {
			err = fmt.Errorf("TUNSETIFF: %w", err)
		}
	}
	if err == nil {
		err = unix.SetNonblock(fd, true)
	}
	if err != nil {
		_ = unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

// DetachQueue takes d, a queue of a multi-queue interface
// (OpenOffloadQueues, OpenWaterQueues), out of the kernel's choice of
// queue for the packets it routes into the interface (TUNSETQUEUE with
// IFF_DETACH_QUEUE), so that nothing is ever queued on it for reading;
// packets written to it still enter the stack. A router lane that only
// writes (the express lane) so gets a queue of its own without taking
// flows from the lanes that read. Writes on a detached queue also leave
// the kernel's flow table alone (tun_get_user hashes a packet for it
// only on an attached queue); on an attached one each write points the
// flow's packets back to that queue, so an express lane writing the
// first packets of every flow to lane 0's queue would pull their replies
// onto lane 0. Do not Read d afterwards: it would wait forever.
func DetachQueue(d Device) error {
	return queueControl(d, "detach queue", func(fd int) error {
		ifr, err := unix.NewIfreq("")
		if err != nil {
			return err
		}
		ifr.SetUint16(unix.IFF_DETACH_QUEUE)
		if err := unix.IoctlIfreq(fd, unix.TUNSETQUEUE, ifr); err != nil {
			return fmt.Errorf("TUNSETQUEUE: %w", err)
		}
		return nil
	})
}

// queueControl runs fn on the descriptor of d, a queue of a multi-queue
// interface (an *Offload or a *Water); errors are prefixed "tun: what: ".
func queueControl(d Device, what string, fn func(fd int) error) error {
	var f *os.File
	switch q := d.(type) {
	case *Offload:
		f = q.dev.File()
	case *Water:
		f = q.file
	default:
		return fmt.Errorf("tun: %s: %T is not a queue of a multi-queue interface", what, d)
	}
	sc, err := f.SyscallConn()
	if err != nil {
		return fmt.Errorf("tun: %s: %w", what, err)
	}
	var fnErr error
	if err := sc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return fmt.Errorf("tun: %s: %w", what, err)
	}
	if fnErr != nil {
		return fmt.Errorf("tun: %s: %w", what, fnErr)
	}
	return nil
}
