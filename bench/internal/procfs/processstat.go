package procfs

import (
	"fmt"
	"strconv"
	"strings"
)

// clockTicks is USER_HZ, the unit of the times in /proc/PID/stat. It is
// 100 on every Linux architecture Go supports.
const clockTicks = 100

// ParseProcessStat returns utime+stime in seconds from the contents of
// /proc/PID/stat. The comm (field 2) may hold spaces and parentheses: the
// fields are counted from the last ')'.
func ParseProcessStat(b []byte) (float64, error) {
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("no ')' after the comm in %q", s)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("%d fields after the comm, want at least 13", len(f))
	}
	ut, err := strconv.ParseUint(f[11], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("utime: %w", err)
	}
	st, err := strconv.ParseUint(f[12], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stime: %w", err)
	}
	return float64(ut+st) / clockTicks, nil
}
