package daemon

import (
	"log/slog"

	"golang.org/x/sys/unix"

	"github.com/bridgehead/bridgehead/config"
)

// The express lane's low-latency mode (config.DefaultExpressPriority) is
// the default wherever the gateway may use it: it needs CAP_BPF for the
// TUN steering program and CAP_SYS_NICE for the real-time threads. A
// gateway without them that leaves expressPriority unset runs the express
// lane as before (the readers sort flows, ordinary threads) and says so
// in one line at start, rather than a warning from each step that fails.

// realtimeCaps are the capabilities the default express priority needs,
// by name.
var realtimeCaps = []struct {
	name string
	bit  int
}{{"CAP_BPF", unix.CAP_BPF}, {"CAP_SYS_NICE", unix.CAP_SYS_NICE}}

// missingRealtimeCaps returns the names of the capabilities in
// realtimeCaps that this process's effective set lacks; nil if it cannot
// tell (then the steps themselves report).
func missingRealtimeCaps() []string {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData // version 3 fills two 32-bit halves
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return nil
	}
	eff := uint64(data[0].Effective) | uint64(data[1].Effective)<<32
	var missing []string
	for _, c := range realtimeCaps {
		if eff&(1<<uint(c.bit)) == 0 {
			missing = append(missing, c.name)
		}
	}
	return missing
}

// expressPriority is the express lane's priority for this run: the
// command line's (run --express-priority), else the config's, else the
// default, which falls back to 0 with one log line when missing, the
// process's missing capabilities (missingRealtimeCaps in production),
// names any.
func expressPriority(cfg *config.Config, flag *int, missing func() []string, log *slog.Logger) int {
	if !cfg.ExpressEnabled() {
		return 0
	}
	if flag != nil {
		return *flag
	}
	prio := cfg.ExpressPriorityOrDefault()
	if cfg.ExpressPrioritySet() || prio == 0 {
		return prio
	}
	if m := missing(); len(m) > 0 {
		log.Info("express lane without kernel steering and real-time threads: the process lacks "+joinNames(m)+
			"; the systemd unit, the deb, the image and the gateway DaemonSet grant them (expressPriority: 0 in the config silences this line)",
			"missing", m, "expressPriority", prio)
		return 0
	}
	return prio
}

func joinNames(names []string) string {
	s := ""
	for i, n := range names {
		switch {
		case i == 0:
		case i == len(names)-1:
			s += " and "
		default:
			s += ", "
		}
		s += n
	}
	return s
}
