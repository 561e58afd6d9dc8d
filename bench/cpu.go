package bench

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the times in /proc/PID/stat and
// /proc/stat. It is 100 on every Linux architecture Go supports.
const clockTicks = 100

// ParseProcStatCPU returns utime+stime in seconds from the contents of
// /proc/PID/stat. The times of all of the process's threads, live and
// exited, are included.
func ParseProcStatCPU(b []byte) (float64, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("proc stat: no ')' in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("proc stat: %d fields after comm", len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("proc stat stime: %w", err)
	}
	return float64(ut+st) / clockTicks, nil
}

// ParseSoftirq returns the machine's total softirq time in seconds from
// the contents of /proc/stat.
func ParseSoftirq(b []byte) (float64, error) {
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) > 7 && f[0] == "cpu" {
			v, err := strconv.ParseUint(f[7], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat softirq: %w", err)
			}
			return float64(v) / clockTicks, nil
		}
	}
	return 0, fmt.Errorf("/proc/stat: no cpu line")
}

// processCPU is utime+stime of a running process in seconds.
func processCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return ParseProcStatCPU(b)
}

// softirqSeconds is the machine's softirq time in seconds.
func softirqSeconds() (float64, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, err
	}
	return ParseSoftirq(b)
}
