package compare

import (
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
)

// cpuMeter accumulates gateway CPU time and machine softirq time over the
// intervals between start and stop, and the bytes carried meanwhile.
type cpuMeter struct {
	proc                procfs.FS
	gw                  modes.Gateways
	a0, b0, s0          float64
	a, b, soft, bytes   float64
	aErr, bErr, softErr error
}

func newCPUMeter(proc procfs.FS, gw modes.Gateways) *cpuMeter { return &cpuMeter{proc: proc, gw: gw} }

func (m *cpuMeter) read() (a, b, s float64) {
	var err error
	if m.gw.A != nil {
		if a, err = m.proc.ProcessCPU(m.gw.A.PID()); err != nil {
			m.aErr = err
		}
	}
	if m.gw.B != nil {
		if b, err = m.proc.ProcessCPU(m.gw.B.PID()); err != nil {
			m.bErr = err
		}
	}
	c, err := m.proc.CPU()
	if err != nil {
		m.softErr = err
	}
	s = c.SoftIRQ
	return
}

func (m *cpuMeter) start() { m.a0, m.b0, m.s0 = m.read() }

func (m *cpuMeter) stop(bytes float64) {
	a, b, s := m.read()
	m.a += a - m.a0
	m.b += b - m.b0
	m.soft += s - m.s0
	m.bytes += bytes
}

// report stores seconds per GB (10^9 bytes) carried.
func (m *cpuMeter) report(v map[string]float64) {
	if m.bytes <= 0 {
		return
	}
	gb := m.bytes / 1e9
	if m.gw.A != nil && m.aErr == nil {
		v[MCPUA] = m.a / gb
	}
	if m.gw.B != nil && m.bErr == nil {
		v[MCPUB] = m.b / gb
	}
	if m.softErr == nil {
		v[MSoftirq] = m.soft / gb
	}
}
