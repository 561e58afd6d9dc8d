// Package procfs reads the kernel counters the benchmarks report: a
// process's CPU time, memory and UDP counters (of its network namespace),
// and the machine's CPU times and softnet backlog drops.
//
// The files are parsed by github.com/prometheus/procfs, the parser that
// node_exporter and client_golang's process collector run on every Linux
// machine they scrape: it tracks the kernel's formats (a comm with spaces
// or parentheses in /proc/PID/stat, the columns /proc/net/softnet_stat has
// gained over the kernel versions) so that this package only picks the
// fields it needs and keeps their units.
package procfs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"

	"github.com/prometheus/procfs"
)

// DefaultMount is where the kernel's proc filesystem is mounted.
const DefaultMount = procfs.DefaultMountPoint

// FS reads counters from one proc filesystem: DefaultMount in the
// harness, a folder of fixtures in tests. It holds no state of its own
// and is safe for concurrent use.
type FS struct {
	mount string
	fs    procfs.FS
}

// New is an FS for the proc filesystem mounted at mount.
func New(mount string) (FS, error) {
	fs, err := procfs.NewFS(mount)
	if err != nil {
		return FS{}, fmt.Errorf("proc filesystem %s: %w", mount, err)
	}
	return FS{mount: mount, fs: fs}, nil
}

func (f FS) proc(pid int) (procfs.Proc, error) {
	p, err := f.fs.Proc(pid)
	if err != nil {
		return procfs.Proc{}, fmt.Errorf("process %d: %w", pid, err)
	}
	return p, nil
}

// ProcessCPU is the user and system time of process pid in seconds
// (/proc/PID/stat: utime+stime), the times of all its threads, live and
// exited, included.
func (f FS) ProcessCPU(pid int) (float64, error) {
	name := strconv.Itoa(pid) + "/stat"
	b, err := os.ReadFile(filepath.Join(f.mount, name))
	if err != nil {
		return 0, fmt.Errorf("process %d: %w", pid, err)
	}
	s, err := ParseProcessStat(b)
	if err != nil {
		return 0, fmt.Errorf("/proc/%s: %w", name, err)
	}
	return s, nil
}

// ProcessMemory is the resident memory of process pid and its high-water
// mark, in KiB (/proc/PID/status: VmRSS, VmHWM). A process without them
// (a kernel thread, a zombie) is an error.
func (f FS) ProcessMemory(pid int) (rssKiB, hwmKiB int64, err error) {
	p, err := f.proc(pid)
	if err != nil {
		return 0, 0, err
	}
	st, err := p.NewStatus()
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/status: %w", pid, err)
	}
	if st.VmRSS == 0 && st.VmHWM == 0 {
		return 0, 0, fmt.Errorf("/proc/%d/status: no VmRSS/VmHWM", pid)
	}
	return int64(st.VmRSS / 1024), int64(st.VmHWM / 1024), nil
}

// UDP is the UDP counters of a network namespace (/proc/net/snmp, "Udp:").
type UDP struct {
	InDatagrams, NoPorts, InErrors, OutDatagrams, RcvbufErrors, SndbufErrors float64
}

// ProcessUDP is the UDP counters of the network namespace of process pid
// (/proc/PID/net is the namespace of PID, not the reader's).
func (f FS) ProcessUDP(pid int) (UDP, error) {
	p, err := f.proc(pid)
	if err != nil {
		return UDP{}, err
	}
	s, err := p.Snmp()
	if err != nil {
		return UDP{}, fmt.Errorf("/proc/%d/net/snmp: %w", pid, err)
	}
	u := s.Udp
	if u.InDatagrams == nil {
		return UDP{}, fmt.Errorf("/proc/%d/net/snmp: no Udp counters", pid)
	}
	val := func(x *float64) float64 {
		if x == nil {
			return 0
		}
		return *x
	}
	return UDP{
		InDatagrams:  val(u.InDatagrams),
		NoPorts:      val(u.NoPorts),
		InErrors:     val(u.InErrors),
		OutDatagrams: val(u.OutDatagrams),
		RcvbufErrors: val(u.RcvbufErrors),
		SndbufErrors: val(u.SndbufErrors),
	}, nil
}

// CPU is the machine's CPU time since boot, in seconds summed over all
// CPUs (/proc/stat, the "cpu" line).
type CPU struct {
	// Total is user, nice, system, idle, iowait, irq, softirq and steal
	// (guest time is already inside user); Busy is Total without idle and
	// iowait; SoftIRQ is the time in softirqs alone.
	Total, Busy, SoftIRQ float64
}

// CPU reads the machine's CPU times.
func (f FS) CPU() (CPU, error) {
	st, err := f.fs.Stat()
	if err != nil {
		return CPU{}, fmt.Errorf("/proc/stat: %w", err)
	}
	c := st.CPUTotal
	total := c.User + c.Nice + c.System + c.Idle + c.Iowait + c.IRQ + c.SoftIRQ + c.Steal
	if total <= 0 {
		return CPU{}, errors.New("/proc/stat: no cpu line")
	}
	return CPU{Total: total, Busy: total - c.Idle - c.Iowait, SoftIRQ: c.SoftIRQ}, nil
}

// SoftnetDrops is the packets the machine dropped because a CPU's input
// backlog (net.core.netdev_max_backlog) was full, summed over the CPUs
// (/proc/net/softnet_stat, second column).
func (f FS) SoftnetDrops() (float64, error) {
	ss, err := f.fs.NetSoftnetStat()
	if err != nil {
		return 0, err
	}
	var sum float64
	for _, s := range ss {
		sum += float64(s.Dropped)
	}
	return sum, nil
}
