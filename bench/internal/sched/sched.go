// Package sched puts every thread of a process under a real-time
// scheduling policy (SCHED_FIFO or SCHED_RR) for bhbench's
// -gateway-sched control: with the gateways' threads scheduled before
// anything else on the machine, what latency remains under load is the
// gateways' own queues and work, not their wait for a CPU.
//
// A Linux scheduling policy belongs to a thread, not a process, so Apply
// sets it on every task under /proc/PID/task. A thread cloned later
// inherits its creator's policy (Go's runtime does not ask for
// SCHED_RESET_ON_FORK), except one cloned while Apply ran by a thread it
// had not set yet: Apply lists the tasks again until it finds no new one,
// and a Keeper applies again periodically over a whole run.
//
// The kernel's real-time throttling (/proc/sys/kernel/sched_rt_runtime_us,
// 950000 of every 1000000 µs by default) still leaves other work 5 % of
// each CPU, so a spinning gateway cannot lock the machine up.
//
// The third control, slice:MICROSECONDS, leaves the threads under the fair
// policy and asks for a short time slice instead (sched_attr's
// sched_runtime, Linux 6.12+): a woken thread with a shorter slice than
// the running one preempts it. A new thread does not inherit a custom
// slice (the kernel starts it at the default), so for it the Keeper's
// periodic passes are what set it.
package sched

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
)

// Policy is a real-time scheduling policy with its static priority, or
// the fair policy with a short slice. The zero Policy means "leave the
// scheduler alone".
type Policy struct {
	// Kind is unix.SCHED_FIFO or unix.SCHED_RR (0, SCHED_OTHER, in the
	// zero Policy).
	Kind int
	// Priority is the static priority, 1 (lowest) .. 99.
	Priority int
	// Slice, with Kind SCHED_OTHER, is the time slice the threads ask
	// the fair scheduler (EEVDF) for, sched_attr.sched_runtime (Linux
	// 6.12 or later): a shorter slice gives a woken thread an earlier
	// deadline, so it preempts a thread running a longer one, without
	// a larger share of the CPU.
	Slice time.Duration
}

// IsZero reports whether p is the zero Policy.
func (p Policy) IsZero() bool { return p == Policy{} }

// String is p as Parse takes it ("fifo:10"), "" for the zero Policy.
func (p Policy) String() string {
	switch p.Kind {
	case unix.SCHED_FIFO:
		return "fifo:" + strconv.Itoa(p.Priority)
	case unix.SCHED_RR:
		return "rr:" + strconv.Itoa(p.Priority)
	}
	if p.Slice > 0 {
		return "slice:" + strconv.FormatInt(p.Slice.Microseconds(), 10)
	}
	return ""
}

// Parse reads "fifo:PRIO" or "rr:PRIO" with PRIO 1..99; "" is the zero
// Policy.
func Parse(s string) (Policy, error) {
	if s == "" {
		return Policy{}, nil
	}
	name, prio, ok := strings.Cut(s, ":")
	if !ok {
		return Policy{}, fmt.Errorf("scheduling policy %q: want fifo:PRIO, rr:PRIO or slice:MICROSECONDS", s)
	}
	var p Policy
	if strings.ToLower(name) == "slice" {
		us, err := strconv.Atoi(prio)
		if err != nil || us < 100 || us > 100000 {
			return Policy{}, fmt.Errorf("scheduling policy %q: slice %q is not 100..100000 µs", s, prio)
		}
		return Policy{Slice: time.Duration(us) * time.Microsecond}, nil
	}
	switch strings.ToLower(name) {
	case "fifo":
		p.Kind = unix.SCHED_FIFO
	case "rr":
		p.Kind = unix.SCHED_RR
	default:
		return Policy{}, fmt.Errorf("scheduling policy %q: unknown policy %q (want fifo, rr or slice)", s, name)
	}
	n, err := strconv.Atoi(prio)
	if err != nil || n < 1 || n > 99 {
		return Policy{}, fmt.Errorf("scheduling policy %q: priority %q is not 1..99", s, prio)
	}
	p.Priority = n
	return p, nil
}

// Tasks lists the thread ids of process pid (procfs.AllThreads).
func Tasks(pid int) ([]int, error) {
	threads, err := procfs.AllThreads(pid)
	if err != nil {
		return nil, err
	}
	tids := make([]int, len(threads))
	for i, t := range threads {
		tids[i] = t.PID
	}
	return tids, nil
}

// Apply puts every thread of process pid under p and returns how many
// threads it set. A thread cloned by one that was not yet set, after the
// tasks were listed, keeps the old policy and is not in the list, so
// Apply lists again until a listing shows no thread it has not set (at
// most 10 times). A thread that ended meanwhile is not an error; any
// other failure is, after trying every thread.
func (p Policy) Apply(pid int) (int, error) {
	if p.IsZero() {
		return 0, nil
	}
	set := map[int]bool{}
	var errs []error
	for range 10 {
		tids, err := Tasks(pid)
		if err != nil {
			return len(set), fmt.Errorf("threads of process %d: %w", pid, err)
		}
		fresh := false
		for _, tid := range tids {
			if set[tid] {
				continue
			}
			fresh = true
			attr := unix.SchedAttr{Size: unix.SizeofSchedAttr, Policy: uint32(p.Kind), Priority: uint32(p.Priority), Runtime: uint64(p.Slice)}
			switch err := unix.SchedSetAttr(tid, &attr, 0); {
			case err == nil:
				set[tid] = true
			case errors.Is(err, unix.ESRCH):
			default:
				errs = append(errs, fmt.Errorf("sched_setattr %s on thread %d of process %d: %w", p, tid, pid, err))
				set[tid] = true // reported once
			}
		}
		if !fresh || len(errs) > 0 {
			break
		}
	}
	return len(set), errors.Join(errs...)
}

// Count returns how many threads of process pid run under p, and how many
// threads it has.
func (p Policy) Count(pid int) (under, total int, err error) {
	tids, err := Tasks(pid)
	if err != nil {
		return 0, 0, fmt.Errorf("threads of process %d: %w", pid, err)
	}
	for _, tid := range tids {
		attr, err := unix.SchedGetAttr(tid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			return under, total, fmt.Errorf("sched_getattr thread %d of process %d: %w", tid, pid, err)
		}
		total++
		if int(attr.Policy) == p.Kind && int(attr.Priority) == p.Priority && (p.Slice == 0 || attr.Runtime == uint64(p.Slice)) {
			under++
		}
	}
	return under, total, nil
}
