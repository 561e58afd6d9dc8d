//go:build linux

package udp

import (
	"fmt"
	"net/netip"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// MaxLanes is the most sockets ListenLanes opens on one port.
const MaxLanes = 64

// Datagram layout the steering program reads (package crypto's wire
// format): byte 0 the type, byte 1 of a transport message its lane byte.
const (
	msgTransport = 4
	noSocket     = 0xffffffff // out of range: the kernel picks by hash
)

// ListenLanes opens n UDP sockets bound to the same address and port with
// SO_REUSEPORT, each a LinuxBind with opts, so that n goroutines can
// receive in parallel. A datagram sent from any of them leaves from the
// shared port. Port 0 picks a free port for the first socket; the others
// join it.
//
// With n > 1 a classic BPF program on the group (SO_ATTACH_REUSEPORT_CBPF)
// picks each datagram's socket: a transport message with a non-zero lane
// byte goes to socket (lane byte mod n), in the order the sockets were
// opened, so one peer's flows spread over the sockets while each flow
// stays on one; every other datagram goes where the kernel's hash of its
// addresses and ports sends it (then one peer's source port reaches one
// socket, in order). Receive coalescing (GRO) is on, as on a lone socket:
// the kernel steers a coalesced run whole, by its first datagram. A run
// that arrived as one message (a sender's GSO batch over veth or
// loopback, or segmented by a NIC and rebuilt by the receiver's GRO)
// holds one lane byte, since senders never batch across lane bytes; but
// GRO may join the end of one lane's batch to the start of another's
// when both come from the same port, and then the second lane's
// datagrams reach the first lane's socket. The receiver opens them there
// (package router counts them as lane strays): correct, and a flow whose
// datagrams are split so may be reordered by up to a batch. A kernel
// without the option (before Linux 4.5) fails ListenLanes; the caller
// falls back to one lane.
//
// When a socket of the group closes, the kernel renumbers the remaining
// ones: close them together. The caller owns the binds. On error nothing
// stays open.
func ListenLanes(addr netip.AddrPort, n int, opts Options) ([]*LinuxBind, error) {
	binds, _, err := listenGroup(addr, n, false, opts)
	return binds, err
}

// ExpressLane is the lane byte of the express lane: a transport message
// carrying it goes to the express socket of a group opened by
// ListenExpress, whatever the number of lanes.
const ExpressLane = 0xff

// ListenExpress is ListenLanes with one more socket in the group, the
// express socket, last in the group's order: transport messages with
// lane byte ExpressLane go to it, the others as ListenLanes steers them
// over the n lane sockets, and datagrams without a lane byte to a lane
// socket by their packet hash (expressProgram): only express datagrams
// reach the express socket. A sender uses the express lane for flows that send
// little (router: sparse flows), so that the receiver reads them from a
// queue of their own instead of behind a bulk flow's datagrams in a lane
// socket's FIFO. The lane sockets keep receive coalescing: a coalesced
// run is steered by its first datagram, and a run never starts with a
// small express datagram followed by larger ones (at most it ends with
// one, which the lane then opens); the express socket never coalesces
// (the kernel does not coalesce for a socket without it). The caller owns the binds; close them together.
func ListenExpress(addr netip.AddrPort, n int, opts Options) (lanes []*LinuxBind, express *LinuxBind, err error) {
	return listenGroup(addr, n, true, opts)
}

// listenGroup opens n lane sockets, and an express socket if express.
func listenGroup(addr netip.AddrPort, n int, express bool, opts Options) ([]*LinuxBind, *LinuxBind, error) {
	if n < 1 || n > MaxLanes {
		return nil, nil, fmt.Errorf("udp: %d sockets outside [1, %d]", n, MaxLanes)
	}
	opts.reusePort = true
	binds := make([]*LinuxBind, 0, n+1)
	fail := func(err error) ([]*LinuxBind, *LinuxBind, error) {
		for _, b := range binds {
			_ = b.Close()
		}
		return nil, nil, err
	}
	total := n
	if express {
		total++
	}
	for i := range total {
		o := opts
		if i == n { // the express socket
			o.noGRO = true
		}
		b, err := Listen(addr, o)
		if err != nil {
			return fail(fmt.Errorf("udp: socket %d of %d on %v: %w", i+1, total, addr, err))
		}
		binds = append(binds, b)
		addr = netip.AddrPortFrom(addr.Addr(), b.LocalAddr().Port())
	}
	var prog []bpf.RawInstruction
	var err error
	switch {
	case express:
		prog, err = expressProgram(n)
	case n > 1:
		prog, err = laneProgram(n)
	}
	if err == nil && prog != nil {
		err = binds[0].steer(prog)
	}
	if err != nil {
		return fail(fmt.Errorf("udp: steering by lane byte on %v: %w", addr, err))
	}
	if express {
		return binds[:n], binds[n], nil
	}
	return binds, nil, nil
}

// expressProgram is the reuseport program of n lane sockets and the
// express socket (socket n): lane byte ExpressLane goes to socket n,
// another non-zero lane byte to socket (lane byte mod n), and every other
// datagram (handshakes, relay messages, transport messages without a lane
// byte) to lane socket (packet hash mod n), never to the express socket.
// Leaving those to the kernel's hash, as laneProgram does, would put one
// peer's whole traffic on the express socket whenever its ports hash
// there: a sender sets no lane byte on a new session until the peer's
// first probe reply (package router), so at every rekey a bulk flow's
// datagrams would reach the express loop, which hands them to its spill
// loop and drops what that cannot take. The packet hash is the one the
// NIC or the kernel recorded (skb->hash); where none was recorded it is 0
// and such datagrams all reach lane socket 0.
func expressProgram(n int) ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: msgTransport, SkipTrue: 6},
		bpf.LoadAbsolute{Off: 1, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: ExpressLane, SkipTrue: 2},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.RetA{},
		bpf.RetConstant{Val: uint32(n)},
		bpf.LoadExtension{Num: bpf.ExtRXHash},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.RetA{},
	})
}

// laneProgram is the reuseport program of a group of n sockets. The
// kernel runs it with the packet's data starting at the UDP payload.
func laneProgram(n int) ([]bpf.RawInstruction, error) {
	return bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 0, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: msgTransport, SkipTrue: 4},
		bpf.LoadAbsolute{Off: 1, Size: 1},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: 0, SkipTrue: 2},
		bpf.ALUOpConstant{Op: bpf.ALUOpMod, Val: uint32(n)},
		bpf.RetA{},
		bpf.RetConstant{Val: noSocket},
	})
}

// steer attaches a reuseport program (laneProgram, expressProgram) to
// b's group.
func (b *LinuxBind) steer(raw []bpf.RawInstruction) error {
	filter := make([]unix.SockFilter, len(raw))
	for i, ins := range raw {
		filter[i] = unix.SockFilter{Code: ins.Op, Jt: ins.Jt, Jf: ins.Jf, K: ins.K}
	}
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	var serr error
	if err := b.raw.Control(func(fd uintptr) {
		serr = unix.SetsockoptSockFprog(int(fd), unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF, &prog)
	}); err != nil {
		return err
	}
	return serr
}
