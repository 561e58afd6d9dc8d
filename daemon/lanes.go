package daemon

import (
	"errors"
	"fmt"
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
}

// openLanes opens n lanes: with n == 1 a plain TUN and socket, as before
// lanes; with more, n queues of one multi-queue TUN interface with
// offloads and n sockets on listen with SO_REUSEPORT. Without offloads
// (turned off, or the kernel refuses them) it opens one lane.
func openLanes(name string, mtu int, offload bool, listen netip.AddrPort, n int, log *slog.Logger) (*laneDevices, error) {
	var l laneDevices
	var err error
	if !offload && n > 1 {
		// The portable backend moves one packet per system call; lanes
		// over its multi-queue TUN did not carry traffic in the e2e lab
		// (TestPortableBackend, not understood yet): one lane.
		log.Info("data path lanes need TUN offloads; one lane with the portable backend", "lanes", n)
		n = 1
	}
	if n > 1 {
		l.tuns, err = tun.OpenOffloadQueues(tun.OffloadConfig{Name: name, MTU: mtu}, n, log)
		if errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("open TUN %s: %w (needs root or CAP_NET_ADMIN)", name, err)
		}
		if err != nil {
			log.Warn("multi-queue TUN with offloads unavailable; one lane", "interface", name, "lanes", n, "err", err)
			n = 1
		}
	}
	if n == 1 {
		var dev tun.Device
		if dev, err = openTUN(name, mtu, offload, log); err != nil {
			return nil, err
		}
		l.tuns = []tun.Device{dev}
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

// conns are the sockets, for the kernel filter.
func (l *laneDevices) conns() []syscall.Conn {
	c := make([]syscall.Conn, len(l.binds))
	for i, b := range l.binds {
		c[i] = b
	}
	return c
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
}
