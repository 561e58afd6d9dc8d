package sdnotify

import (
	"bytes"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// notifySocket listens like systemd does and points NOTIFY_SOCKET at it.
// The watchdog variables are cleared so the test sees only what it sets.
func notifySocket(t *testing.T) *net.UnixConn {
	t.Helper()
	path := filepath.Join(t.TempDir(), "notify")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	t.Setenv("WATCHDOG_USEC", "")
	t.Setenv("WATCHDOG_PID", "")
	return conn
}

// receive returns the next datagram. Send on a unixgram socket completes
// only once the datagram is queued, so it is there already.
func receive(t *testing.T, conn *net.UnixConn) string {
	t.Helper()
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 4096)
	n, err := conn.Read(buf)
	if err != nil {
		t.Fatalf("no notification: %v", err)
	}
	return string(buf[:n])
}

func TestMessages(t *testing.T) {
	tests := []struct {
		name string
		call func(*Notifier)
		want string // regexp, anchored
	}{
		{"ready", (*Notifier).Ready, `READY=1`},
		{"stopping", (*Notifier).Stopping, `STOPPING=1`},
		{"reloading", (*Notifier).Reloading, `RELOADING=1\nMONOTONIC_USEC=[0-9]+`},
		{"watchdog", (*Notifier).Watchdog, `WATCHDOG=1`},
		{"status", func(n *Notifier) { n.Status("2/2 sites up") }, `STATUS=2/2 sites up`},
		{"status newlines", func(n *Notifier) { n.Status("a\nREADY=1\r\nb") }, `STATUS=a READY=1 b`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			conn := notifySocket(t)
			n := New(nil)
			if !n.Enabled() {
				t.Fatal("Enabled() = false with NOTIFY_SOCKET set")
			}
			tt.call(n)
			if got := receive(t, conn); !regexp.MustCompile(`^` + tt.want + `$`).MatchString(got) {
				t.Errorf("sent %q, want %q", got, tt.want)
			}
		})
	}
}

func TestDisabled(t *testing.T) {
	conn := notifySocket(t)
	path := os.Getenv("NOTIFY_SOCKET")
	t.Setenv("NOTIFY_SOCKET", "")
	t.Setenv("WATCHDOG_USEC", "30000000")
	off := New(nil)
	// The environment is read once: a socket appearing later is ignored.
	t.Setenv("NOTIFY_SOCKET", path)
	if off.Enabled() || off.WatchdogInterval() != 0 {
		t.Errorf("Enabled() = %v, WatchdogInterval() = %v; want false, 0", off.Enabled(), off.WatchdogInterval())
	}
	off.Ready()
	off.Status("x")
	off.Watchdog()
	off.Reloading()
	off.Stopping()
	New(nil).Status("marker")
	if got := receive(t, conn); got != "STATUS=marker" {
		t.Errorf("first datagram = %q, want the marker: the disabled notifier sent something", got)
	}
}

func TestWatchdogInterval(t *testing.T) {
	pid := fmt.Sprint(os.Getpid())
	tests := []struct {
		name, usec, pid string
		want            time.Duration
		warns           bool
	}{
		{name: "off", want: 0},
		{name: "30s", usec: "30000000", want: 15 * time.Second},
		{name: "our pid", usec: "30000000", pid: pid, want: 15 * time.Second},
		{name: "another pid", usec: "30000000", pid: "1", want: 0},
		{name: "garbage", usec: "soon", want: 0, warns: true},
		{name: "zero", usec: "0", want: 0, warns: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			notifySocket(t)
			t.Setenv("WATCHDOG_USEC", tt.usec)
			t.Setenv("WATCHDOG_PID", tt.pid)
			var logs bytes.Buffer
			n := New(slog.New(slog.NewTextHandler(&logs, nil)))
			if got := n.WatchdogInterval(); got != tt.want {
				t.Errorf("WatchdogInterval() = %v, want %v", got, tt.want)
			}
			if warned := strings.Contains(logs.String(), "level=WARN"); warned != tt.warns {
				t.Errorf("warned = %v, want %v (log %q)", warned, tt.warns, logs.String())
			}
		})
	}
}

func TestSendFailureIsLogged(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", filepath.Join(t.TempDir(), "gone"))
	t.Setenv("WATCHDOG_USEC", "")
	var logs bytes.Buffer
	n := New(slog.New(slog.NewTextHandler(&logs, nil)))
	n.Reloading()
	if !strings.Contains(logs.String(), "systemd notification failed") || !strings.Contains(logs.String(), `state="RELOADING=1"`) {
		t.Errorf("log = %q, want a warning naming RELOADING=1", logs.String())
	}
}
