//go:build linux

package earlydrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Map sizes. Receiver indices: a few per peer (current, previous, next
// session); endpoints: one per configured peer gateway.
const (
	MaxIndices   = 1 << 16
	MaxEndpoints = 1 << 12
	// MaxBlocked bounds the blocked sources; the least recently used
	// goes first when it is full.
	MaxBlocked = 1 << 14
)

// Filter is an attached early-drop filter. Create it with Attach.
type Filter struct {
	mu        sync.Mutex
	conns     []syscall.Conn
	prog      *ebpf.Program
	indices   *ebpf.Map // [4]byte receiver index (wire order) -> uint8
	endpoints *ebpf.Map // endpointKey -> uint8
	counts    *ebpf.Map // per-CPU uint64 per Reason
	blocked   *ebpf.Map // [16]byte source address -> uint64 CLOCK_MONOTONIC ns until which it is blocked
	eps       map[[endpointKeySize]byte]bool
	attached  bool
}

// Attach loads the filter and attaches it to conn, a UDP socket, and to
// the more sockets of the same port (router lanes, udp.ListenLanes): one
// program and one set of maps for all of them. It needs
// CAP_BPF (or CAP_SYS_ADMIN) and Linux 5.7 or later (the program reads
// __sk_buff.gso_size); elsewhere loading fails and callers run without
// the filter. The caller owns the Filter and must Close it;
// closing conn does not.
func Attach(conn syscall.Conn, more ...syscall.Conn) (*Filter, error) {
	f, err := load(0)
	if err != nil {
		return nil, err
	}
	for i, c := range append([]syscall.Conn{conn}, more...) {
		if err = link.AttachSocketFilter(c, f.prog); err != nil {
			for _, c := range f.conns {
				_ = link.DetachSocketFilter(c)
			}
			f.closeMaps()
			return nil, fmt.Errorf("earlydrop: attach to socket %d: %w", i, err)
		}
		f.conns = append(f.conns, c)
	}
	f.attached = true
	return f, nil
}

// load creates the maps and loads the program for data whose UDP header
// starts at udp (see program).
func load(udp int32) (_ *Filter, err error) {
	f := &Filter{eps: map[[endpointKeySize]byte]bool{}}
	defer func() {
		if err != nil {
			f.closeMaps()
		}
	}()
	if f.indices, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "bh_indices", Type: ebpf.Hash, KeySize: 4, ValueSize: 1, MaxEntries: MaxIndices,
	}); err != nil {
		return nil, fmt.Errorf("earlydrop: index map: %w", err)
	}
	if f.endpoints, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "bh_endpoints", Type: ebpf.Hash, KeySize: endpointKeySize, ValueSize: 1, MaxEntries: MaxEndpoints,
	}); err != nil {
		return nil, fmt.Errorf("earlydrop: endpoint map: %w", err)
	}
	if f.counts, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "bh_drops", Type: ebpf.PerCPUArray, KeySize: 4, ValueSize: 8, MaxEntries: uint32(NumReasons),
	}); err != nil {
		return nil, fmt.Errorf("earlydrop: counter map: %w", err)
	}
	if f.blocked, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "bh_blocked", Type: ebpf.LRUHash, KeySize: 16, ValueSize: 8, MaxEntries: MaxBlocked,
	}); err != nil {
		return nil, fmt.Errorf("earlydrop: blocked-source map: %w", err)
	}
	if f.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bh_earlydrop",
		Type:         ebpf.SocketFilter,
		License:      "MIT",
		Instructions: program(f.indices.FD(), f.endpoints.FD(), f.counts.FD(), f.blocked.FD(), udp),
	}); err != nil {
		return nil, fmt.Errorf("earlydrop: load program: %w", err)
	}
	return f, nil
}

// Attached reports whether the filter is attached to the socket.
func (f *Filter) Attached() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.attached
}

// indexKey is a receiver index as it appears on the wire.
func indexKey(idx uint32) [4]byte {
	var k [4]byte
	binary.LittleEndian.PutUint32(k[:], idx)
	return k
}

// AddIndex lets transport messages for idx through. Call it before the
// session can receive.
func (f *Filter) AddIndex(idx uint32) error {
	k := indexKey(idx)
	if err := f.indices.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
		return fmt.Errorf("earlydrop: add index: %w", err)
	}
	return nil
}

// RemoveIndex stops letting transport messages for idx through. Removing
// an index that is not there is not an error.
func (f *Filter) RemoveIndex(idx uint32) error {
	k := indexKey(idx)
	if err := f.indices.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
		return fmt.Errorf("earlydrop: remove index: %w", err)
	}
	return nil
}

func endpointKey(ap netip.AddrPort) [endpointKeySize]byte {
	var k [endpointKeySize]byte
	a := ap.Addr()
	if a.Is4() {
		a = netip.AddrFrom16(a.As16())
	}
	a16 := a.As16()
	copy(k[:16], a16[:])
	binary.BigEndian.PutUint16(k[16:18], ap.Port())
	return k
}

// SetEndpoints replaces the set of peer endpoints whose transport messages
// pass even with an unknown receiver index.
func (f *Filter) SetEndpoints(eps []netip.AddrPort) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	want := make(map[[endpointKeySize]byte]bool, len(eps))
	for _, ep := range eps {
		want[endpointKey(ep)] = true
	}
	for k := range want {
		if f.eps[k] {
			continue
		}
		if err := f.endpoints.Update(k, uint8(1), ebpf.UpdateAny); err != nil {
			return fmt.Errorf("earlydrop: add endpoint: %w", err)
		}
		f.eps[k] = true
	}
	for k := range f.eps {
		if want[k] {
			continue
		}
		if err := f.endpoints.Delete(k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("earlydrop: remove endpoint: %w", err)
		}
		delete(f.eps, k)
	}
	return nil
}

// Block drops initiations and responses from addr in the kernel for d,
// except from configured peer endpoints (SetEndpoints). A later Block of
// the same address replaces the deadline; d <= 0 unblocks.
func (f *Filter) Block(addr netip.Addr, d time.Duration) error {
	k := endpointKey(netip.AddrPortFrom(addr, 0))
	var key [16]byte
	copy(key[:], k[:16])
	if d <= 0 {
		if err := f.blocked.Delete(key); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
			return fmt.Errorf("earlydrop: unblock: %w", err)
		}
		return nil
	}
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return fmt.Errorf("earlydrop: clock: %w", err)
	}
	until := uint64(ts.Nano()) + uint64(d)
	if err := f.blocked.Update(key, until, ebpf.UpdateAny); err != nil {
		return fmt.Errorf("earlydrop: block: %w", err)
	}
	return nil
}

// Counts returns the datagrams dropped so far, by Reason, summed over CPUs.
func (f *Filter) Counts() (c [NumReasons]uint64, err error) {
	var per []uint64
	for r := range NumReasons {
		if err := f.counts.Lookup(uint32(r), &per); err != nil {
			return c, fmt.Errorf("earlydrop: counts: %w", err)
		}
		for _, v := range per {
			c[r] += v
		}
	}
	return c, nil
}

// Detach removes the filter from the socket: every datagram reaches
// userspace again. Counts keep working. Safe to call more than once. If
// the kernel refuses, the filter stays attached (and Attached says so),
// and a later Detach tries again: nil means the program is off the socket.
func (f *Filter) Detach() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.attached {
		return nil
	}
	for len(f.conns) > 0 {
		if err := link.DetachSocketFilter(f.conns[0]); err != nil {
			return fmt.Errorf("earlydrop: detach: %w", err)
		}
		f.conns = f.conns[1:]
	}
	f.attached = false
	return nil
}

// Close frees the program and maps. The socket keeps its own reference to
// an attached program, so Close does not detach it: call Detach first, or
// close the socket.
func (f *Filter) Close() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closeMaps()
	return nil
}

func (f *Filter) closeMaps() {
	if f.prog != nil {
		f.prog.Close()
	}
	for _, m := range []*ebpf.Map{f.indices, f.endpoints, f.counts, f.blocked} {
		if m != nil {
			m.Close()
		}
	}
}
