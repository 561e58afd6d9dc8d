package daemon

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/config"
)

// lanTargets pings the configured LAN targets (lan.targets) through the
// LAN interface and says when none of them has answered within
// lan.targetTimeout. Link state and routes (lanLinks.probe) cannot see a
// LAN that is up and routed but passes nothing: a dead switch port, a
// VLAN, security group or route table change on the site's side.
//
// Sockets are raw ICMP sockets bound to the LAN interface
// (SO_BINDTODEVICE), so a reply that comes back some other way does not
// count, with a kernel filter that passes only echo replies. They are
// opened by tick in the caller's network namespace.
//
// Ownership: tick and Close are called from the LAN watch's goroutine
// only, which owns every field but last; the reader goroutines (one per
// open socket) record replies in last, under mu.
type lanTargets struct {
	log *slog.Logger
	now func() time.Duration // monotonic time since some epoch
	id  uint16               // echo identifier: ours among the host's pings

	seq     uint16
	ifname  string
	targets []netip.Addr
	since   time.Duration  // when targets (or the interface) last changed
	conns   [2]*targetConn // IPv4, IPv6; nil until a target needs one
	sendErr string         // the last send error, for the problem text

	mu   sync.Mutex
	last map[netip.Addr]time.Duration // when each target last answered
}

// targetConn is one raw ICMP socket and its reader.
type targetConn struct {
	c    net.PacketConn
	v6   bool
	done chan struct{} // closed when the reader returns
}

func newLANTargets(log *slog.Logger, now func() time.Duration) *lanTargets {
	var b [2]byte
	_, _ = rand.Read(b[:])
	return &lanTargets{log: log, now: now, id: binary.BigEndian.Uint16(b[:]), last: map[netip.Addr]time.Duration{}}
}

// tick sends one echo request to every target of cfg and returns why the
// gateway cannot deliver ("" when some target answered within the
// timeout, or cfg names no targets). A new target list or interface
// starts a new grace period of one timeout.
func (t *lanTargets) tick(cfg *config.Config) string {
	var want []netip.Addr
	ifname := ""
	if cfg.LAN != nil {
		want, ifname = cfg.LAN.Targets, cfg.LAN.Interface
	}
	now := t.now()
	if ifname != t.ifname || !slices.Equal(want, t.targets) {
		t.closeConns()
		t.ifname, t.targets, t.since = ifname, slices.Clone(want), now
		t.mu.Lock()
		clear(t.last)
		t.mu.Unlock()
	}
	if len(want) == 0 {
		return ""
	}
	t.seq++
	t.sendErr = ""
	for _, a := range want {
		if err := t.send(a); err != nil {
			t.sendErr = err.Error()
		}
	}
	newest := t.since
	t.mu.Lock()
	for _, a := range want {
		newest = max(newest, t.last[a])
	}
	t.mu.Unlock()
	timeout := cfg.LAN.LANTargetTimeout()
	if now-newest <= timeout {
		return ""
	}
	names := make([]string, len(want))
	for i, a := range want {
		names[i] = a.String()
	}
	msg := fmt.Sprintf("no LAN target answered ICMP echo through %s within %s (%s)", ifname, timeout, strings.Join(names, ", "))
	if t.sendErr != "" {
		msg += ": " + t.sendErr
	}
	return msg
}

// send sends one echo request to a, opening the family's socket first
// when needed.
func (t *lanTargets) send(a netip.Addr) error {
	fam := 0
	if a.Is6() {
		fam = 1
	}
	if t.conns[fam] == nil {
		c, err := openTargetConn(t.ifname, a.Is6())
		if err != nil {
			return err
		}
		t.conns[fam] = c
		go t.read(c)
	}
	typ := icmp.Type(ipv4.ICMPTypeEcho)
	if a.Is6() {
		typ = ipv6.ICMPTypeEchoRequest
	}
	m := icmp.Message{Type: typ, Body: &icmp.Echo{ID: int(t.id), Seq: int(t.seq), Data: []byte("bridgehead lan")}}
	b, err := m.Marshal(nil) // the kernel computes the ICMPv6 checksum
	if err != nil {
		return err
	}
	_, err = t.conns[fam].c.WriteTo(b, &net.IPAddr{IP: a.AsSlice()})
	return err
}

// read records the echo replies with our identifier until c is closed.
func (t *lanTargets) read(c *targetConn) {
	defer close(c.done)
	proto := 1 // ICMP
	if c.v6 {
		proto = 58 // ICMPv6
	}
	buf := make([]byte, 1500)
	for {
		n, from, err := c.c.ReadFrom(buf)
		if err != nil {
			if !errors.Is(err, net.ErrClosed) {
				t.log.Warn("LAN target socket failed; the next tick reopens it", "err", err)
			}
			return
		}
		m, err := icmp.ParseMessage(proto, buf[:n])
		if err != nil {
			continue
		}
		e, ok := m.Body.(*icmp.Echo)
		if !ok || e.ID != int(t.id) || (m.Type != ipv4.ICMPTypeEchoReply && m.Type != ipv6.ICMPTypeEchoReply) {
			continue
		}
		ipa, ok := from.(*net.IPAddr)
		if !ok {
			continue
		}
		src, ok := netip.AddrFromSlice(ipa.IP)
		if !ok {
			continue
		}
		now := t.now()
		t.mu.Lock()
		t.last[src.Unmap()] = now
		t.mu.Unlock()
	}
}

// closeConns closes the sockets and waits for their readers.
func (t *lanTargets) closeConns() {
	for i, c := range t.conns {
		if c != nil {
			c.c.Close()
			<-c.done
			t.conns[i] = nil
		}
	}
}

// Close stops pinging; tick may not be called after it.
func (t *lanTargets) Close() { t.closeConns() }

// openTargetConn opens a raw ICMP socket bound to ifname that receives
// echo replies only.
func openTargetConn(ifname string, v6 bool) (*targetConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptString(int(fd), unix.SOL_SOCKET, unix.SO_BINDTODEVICE, ifname)
		})
		if err != nil {
			return err
		}
		if serr != nil {
			return fmt.Errorf("binding to the LAN interface %s: %w", ifname, serr)
		}
		return nil
	}}
	network, addr := "ip4:icmp", "0.0.0.0"
	if v6 {
		network, addr = "ip6:ipv6-icmp", "::"
	}
	c, err := lc.ListenPacket(context.Background(), network, addr)
	if err != nil {
		return nil, fmt.Errorf("opening a LAN target socket: %w", err)
	}
	// Only echo replies wake the reader, not every ICMP message the
	// gateway gets (neighbour discovery, errors of forwarded traffic).
	if v6 {
		var f ipv6.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv6.ICMPTypeEchoReply)
		err = ipv6.NewPacketConn(c).SetICMPFilter(&f)
	} else {
		var f ipv4.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv4.ICMPTypeEchoReply)
		err = ipv4.NewPacketConn(c).SetICMPFilter(&f)
	}
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("filtering a LAN target socket: %w", err)
	}
	return &targetConn{c: c, v6: v6, done: make(chan struct{})}, nil
}
