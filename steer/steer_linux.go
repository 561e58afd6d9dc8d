//go:build linux

package steer

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"

	"github.com/cilium/ebpf"
)

// Program is a loaded steering program and its state map. Create it with
// Load; attach it with tun.SetSteering.
//
// Ownership and concurrency: the caller owns the Program and must Close
// it. It does not change after Load: FD may be called from any
// goroutine, Close once, after the last FD. A TUN interface it is
// attached to holds its own reference to the program (and the program to
// its map), so Close does not detach it: the interface keeps steering
// until it is detached or goes away.
type Program struct {
	prog  *ebpf.Program
	state *ebpf.Map // Buckets flow buckets and the aggregate, see program
}

// Load checks c (an error names the field), creates the state map and
// loads the program. It needs CAP_BPF (or CAP_SYS_ADMIN) and a kernel
// with BPF atomics (Linux 5.12 or later).
func Load(c Config) (_ *Program, err error) {
	if c, err = c.withDefaults(); err != nil {
		return nil, err
	}
	for c.Seed == 0 {
		var b [4]byte
		if _, err := rand.Read(b[:]); err != nil {
			return nil, fmt.Errorf("steer: seed: %w", err)
		}
		c.Seed = binary.NativeEndian.Uint32(b[:])
	}
	p := &Program{}
	defer func() {
		if err != nil {
			p.Close()
		}
	}()
	if p.state, err = ebpf.NewMap(&ebpf.MapSpec{
		Name: "bh_steer", Type: ebpf.Array, KeySize: 4, ValueSize: valueSize, MaxEntries: stateEntries,
	}); err != nil {
		return nil, fmt.Errorf("steer: state map: %w", err)
	}
	if p.prog, err = ebpf.NewProgram(&ebpf.ProgramSpec{
		Name:         "bh_steer",
		Type:         ebpf.SocketFilter,
		License:      "MIT",
		Instructions: program(p.state.FD(), c),
	}); err != nil {
		return nil, fmt.Errorf("steer: load program: %w", err)
	}
	return p, nil
}

// FD is the program's file descriptor, for tun.SetSteering. It stays
// valid until Close.
func (p *Program) FD() int { return p.prog.FD() }

// Close frees the program and its map (see Program for an attached one).
func (p *Program) Close() error {
	var err error
	if p.prog != nil {
		err = p.prog.Close()
	}
	if p.state != nil {
		if e := p.state.Close(); err == nil {
			err = e
		}
	}
	if err != nil {
		return fmt.Errorf("steer: close: %w", err)
	}
	return nil
}
