package daemon

import (
	"errors"
	"fmt"
	"github.com/bridgehead/bridgehead/steer"
	"log/slog"
	"net/netip"
	"os"
	"syscall"

	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/tun"
	"github.com/bridgehead/bridgehead/udp"
)

// laneDevices are the data path's devices: one queue of the TUN interface
// and one socket of the listen port per lane (router.Lane). Lane 0 is the
// router's TUN and Bind. Until router.New takes them, close closes them.
type laneDevices struct {
	tuns  []tun.Device
	binds []*udp.LinuxBind
	// express is the express socket (udp.ListenExpress,
	// router.Options.Express), nil without one.
	express *udp.LinuxBind
	// expressTUN is the express lane's TUN queue. With steered, the
	// kernel's steering program (package steer) queues sparse flows on
	// it and the express lane reads it too; without, it is detached
	// (tun.DetachQueue) and only written. Nil when neither works: the
	// express lane then writes to lane 0's queue.
	expressTUN tun.Device
	steered    bool
}

// openLanes opens n lanes: with n == 1 a plain TUN, with more n queues
// of one multi-queue TUN interface, and n sockets on listen with
// SO_REUSEPORT plus, with express, the express socket (sparse flows,
// udp.ListenExpress); without express and with one lane, one plain
// socket. The queues have offloads where the kernel allows them and
// interface.offload is on, else they are the portable backend's (water,
// one packet per system call).
func openLanes(name string, mtu int, offload bool, listen netip.AddrPort, n int, express, steered bool, log *slog.Logger) (*laneDevices, error) {
	var l laneDevices
	var err error
	if express {
		if l.tuns, l.expressTUN, l.steered, err = openExpressQueues(name, mtu, offload, n, steered, log); err != nil {
			return nil, err
		}
	}
	if l.tuns == nil && n > 1 {
		if l.tuns, err = openTUNQueues(name, mtu, offload, n, log); err != nil {
			return nil, err
		}
	}
	if l.tuns == nil && n == 1 {
		var dev tun.Device
		if dev, err = openTUN(name, mtu, offload, log); err != nil {
			return nil, err
		}
		l.tuns = []tun.Device{dev}
	}
	if express {
		if l.binds, l.express, err = udp.ListenExpress(listen, n, udp.Options{}); err != nil {
			l.close()
			return nil, fmt.Errorf("listen %s: %w", listen, err)
		}
		log.Info("data path lanes", "lanes", n, "express", true, "steered", l.steered, "interface", l.tuns[0].Name(), "listen", l.binds[0].LocalAddr())
		return &l, nil
	}
	if n == 1 {
		b, err := udp.Listen(listen, udp.Options{})
		if err != nil {
			l.close()
			return nil, fmt.Errorf("listen %s: %w", listen, err)
		}
		l.binds = []*udp.LinuxBind{b}
		return &l, nil
	}
	if l.binds, err = udp.ListenLanes(listen, n, udp.Options{}); err != nil {
		l.close()
		return nil, fmt.Errorf("listen %s: %w", listen, err)
	}
	log.Info("data path lanes", "lanes", n, "interface", l.tuns[0].Name(), "listen", l.binds[0].LocalAddr())
	return &l, nil
}

// openExpressQueues opens n queues of a multi-queue interface for the
// lanes (as openTUNQueues: offloads where possible, else the portable
// backend) and one more for the express lane. With steer it attaches a steering
// program (package steer) that queues sparse flows on the express queue
// and the others on the first n by their hash; the express lane reads
// and writes that queue (steered). Where the kernel refuses the program
// it logs why and detaches the express queue instead, which the express
// lane then only writes, and whose writes must not steer flows
// (tun.DetachQueue). When the kernel refuses that too it logs why and
// returns no queues, and the caller opens the lanes' queues as without
// express (the express lane then writes to lane 0's queue).
func openExpressQueues(name string, mtu int, offload bool, n int, steer bool, log *slog.Logger) (lanes []tun.Device, express tun.Device, steered bool, err error) {
	devs, err := openTUNQueues(name, mtu, offload, n+1, log)
	if err != nil {
		return nil, nil, false, err
	}
	if steer {
		err := steerExpress(devs[0], n)
		if err == nil {
			return devs[:n], devs[n], true, nil
		}
		log.Warn("express lane: the kernel does not steer sparse flows to it; the lanes' readers sort flows", "interface", name, "err", err)
	}
	if err := tun.DetachQueue(devs[n]); err != nil {
		for _, d := range devs {
			d.Close()
		}
		log.Warn("express lane writes to lane 0's TUN queue: no queue of its own", "interface", name, "err", err)
		return nil, nil, false, nil
	}
	return devs[:n], devs[n], false, nil
}

// steerExpress loads the steering program for n lanes and the express
// queue and attaches it to dev's interface. The interface keeps the
// program (and its maps) for as long as it exists; this process's
// handles are closed at once.
func steerExpress(dev tun.Device, n int) error {
	prog, err := steer.Load(steer.Config{Queues: n, PacketCost: steer.DefaultPacketCost})
	if err != nil {
		return err
	}
	defer prog.Close()
	return tun.SetSteering(dev, prog.FD())
}

// openTUNQueues is openTUN for n > 1 queues.
func openTUNQueues(name string, mtu int, offload bool, n int, log *slog.Logger) ([]tun.Device, error) {
	if offload {
		devs, err := tun.OpenOffloadQueues(tun.OffloadConfig{Name: name, MTU: mtu}, n, log)
		if err == nil {
			return devs, nil
		}
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("open TUN %s: %w (needs root or CAP_NET_ADMIN)", name, err)
		}
		log.Warn("TUN offloads unavailable; using the portable backend (one packet per system call)", "interface", name, "lanes", n, "err", err)
	} else {
		log.Info("TUN offloads turned off by interface.offload; using the portable backend (one packet per system call)", "interface", name, "lanes", n)
	}
	devs, err := tun.OpenWaterQueues(tun.WaterConfig{Name: name, MTU: mtu}, n)
	if err != nil {
		return nil, fmt.Errorf("open TUN %s with %d queues (lanes): %w", name, n, err)
	}
	return devs, nil
}

// conns are the sockets, for the kernel filter.
func (l *laneDevices) conns() []syscall.Conn {
	c := make([]syscall.Conn, 0, len(l.binds)+1)
	for _, b := range l.binds {
		c = append(c, b)
	}
	if l.express != nil {
		c = append(c, l.express)
	}
	return c
}

// sockets are every socket, for the send failures' metrics.
func (l *laneDevices) sockets() []sendFailureCounter {
	s := make([]sendFailureCounter, 0, len(l.binds)+1)
	for _, b := range l.binds {
		s = append(s, b)
	}
	if l.express != nil {
		s = append(s, l.express)
	}
	return s
}

// routerLanes are lanes 1.. for router.Options.Lanes, each socket wrapped
// by wrap (the relay path).
func (l *laneDevices) routerLanes(wrap func(udp.Bind) udp.Bind) []router.Lane {
	var out []router.Lane
	for i := 1; i < len(l.tuns); i++ {
		out = append(out, router.Lane{TUN: l.tuns[i], Bind: wrap(l.binds[i])})
	}
	return out
}

// close closes every lane's devices.
func (l *laneDevices) close() {
	for _, d := range l.tuns {
		d.Close()
	}
	for _, b := range l.binds {
		b.Close()
	}
	if l.express != nil {
		l.express.Close()
	}
	if l.expressTUN != nil {
		l.expressTUN.Close()
	}
}
