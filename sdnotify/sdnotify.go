// Package sdnotify tells systemd about the daemon's lifecycle through the
// sd_notify protocol (Type=notify units): started, reloading, stopping,
// a status line, and watchdog keep-alives. It is the one place the daemon
// talks to systemd; outside systemd (NOTIFY_SOCKET unset) every method
// does nothing.
//
// The datagrams are sent by github.com/coreos/go-systemd/v22/daemon, which
// handles abstract socket addresses and the WATCHDOG_PID check.
package sdnotify

import (
	"log/slog"
	"os"
	"strings"
	"time"

	sd "github.com/coreos/go-systemd/v22/daemon"
)

// Notifier sends sd_notify messages. It reads the environment once, in
// New, and is immutable afterwards: safe for concurrent use. Failures to
// send are logged, never returned: systemd notification must not stop
// the gateway.
type Notifier struct {
	log      *slog.Logger
	enabled  bool
	watchdog time.Duration // half of WATCHDOG_USEC; 0: disabled
}

// New returns a Notifier for the NOTIFY_SOCKET and WATCHDOG_USEC of the
// environment. log may be nil.
func New(log *slog.Logger) *Notifier {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	n := &Notifier{log: log, enabled: os.Getenv("NOTIFY_SOCKET") != ""}
	if !n.enabled {
		return n
	}
	wd, err := sd.SdWatchdogEnabled(false)
	if err != nil {
		log.Warn("systemd watchdog disabled: bad environment", "err", err)
	}
	n.watchdog = wd / 2
	return n
}

// Enabled reports whether systemd is listening (NOTIFY_SOCKET was set).
func (n *Notifier) Enabled() bool { return n.enabled }

// Ready tells systemd that start-up, or a reload, has finished.
func (n *Notifier) Ready() { n.send(sd.SdNotifyReady) }

// Stopping tells systemd that the daemon is shutting down.
func (n *Notifier) Stopping() { n.send(sd.SdNotifyStopping) }

// Reloading tells systemd that a config reload has started; call Ready
// when it is done, whether it succeeded or not. MONOTONIC_USEC is
// included as Type=notify-reload requires.
func (n *Notifier) Reloading() {
	n.send(sd.SdNotifyReloading + "\n" + strings.TrimSuffix(sd.SdNotifyMonotonicUsec(), "\n"))
}

// Status sets the one-line status `systemctl status` shows. Line breaks
// in s become spaces: a newline would start another assignment.
func (n *Notifier) Status(s string) {
	n.send("STATUS=" + strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ").Replace(s))
}

// WatchdogInterval is how often to call Watchdog: half of WatchdogSec=
// (WATCHDOG_USEC), or 0 when the watchdog is off or meant for another
// process.
func (n *Notifier) WatchdogInterval() time.Duration { return n.watchdog }

// Watchdog sends a watchdog keep-alive. Call it every WatchdogInterval
// from a loop that only runs while the gateway is healthy.
func (n *Notifier) Watchdog() { n.send(sd.SdNotifyWatchdog) }

func (n *Notifier) send(state string) {
	if !n.enabled {
		return
	}
	if _, err := sd.SdNotify(false, state); err != nil {
		n.log.Warn("systemd notification failed", "state", firstLine(state), "err", err)
	}
}

func firstLine(s string) string {
	if i := strings.IndexByte(s, '\n'); i >= 0 {
		return s[:i]
	}
	return s
}
