package scale

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/bench/catalog"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
)

// ReloadOptions shape a start-up and reload measurement: one `bridgehead
// run` on a generated catalog, no farm (its peers' endpoints lead
// nowhere), its log file in the config's directory.
type ReloadOptions struct {
	Binary    string
	Sites     int           // default 200
	Gateways  int           // default 3
	Prefixes  int           // default 100,000
	Idle      time.Duration // idle window before and after the reloads (default 10 s)
	Reloads   int           // SIGHUP reloads of a changed file (default 3)
	Timeout   time.Duration // longest wait for start-up or a reload (default 120 s)
	Dir       string
	Progress  func(format string, args ...any)
	Namespace string // default bhreload<PID>
}

// ReloadReport holds the figures of RunReload.
type ReloadReport struct {
	Prefixes, Peers int
	LoadAvg         string
	// StartupSeconds: the daemon's "starting bridgehead" to "gateway up"
	// log lines; StartupCPUSeconds its CPU time by then.
	StartupSeconds, StartupCPUSeconds float64
	TunnelRoutes                      int
	RSSMiBUp                          float64
	IdleCPUPercent                    float64
	// WatchReloadSeconds: the file changed to "config reloaded" (the
	// watcher's 250 ms debounce included).
	WatchReloadSeconds float64
	// ReloadSeconds: SIGHUP to "config reloaded", for each reload of a
	// changed file, and the CPU each took.
	ReloadSeconds, ReloadCPUSeconds []float64
	RSSMiBAfter                     float64
	// IdleCPUPercentAfter: with a log file, a CPU profile and the control
	// socket in the config's directory; the first measurements of issue
	// #14 found a full core busy here.
	IdleCPUPercentAfter float64
}

// RunReload measures start-up, an idle window, reloads and another idle
// window.
func RunReload(ctx context.Context, o ReloadOptions) (*ReloadReport, error) {
	if o.Binary == "" {
		return nil, errors.New("scale: no bridgehead binary")
	}
	def := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	def(&o.Sites, 200)
	def(&o.Gateways, 3)
	def(&o.Prefixes, 100_000)
	def(&o.Reloads, 3)
	if o.Idle == 0 {
		o.Idle = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 120 * time.Second
	}
	if o.Progress == nil {
		o.Progress = func(string, ...any) {}
	}
	if o.Namespace == "" {
		o.Namespace = fmt.Sprintf("bhreload%d", os.Getpid())
	}
	var err error
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "bhreload"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	cat, err := catalog.New(catalog.Options{Sites: o.Sites, Gateways: o.Gateways, Prefixes: o.Prefixes,
		EndpointBase: netip.MustParseAddr("127.1.0.1")})
	if err != nil {
		return nil, err
	}
	cfg, err := cat.Write(o.Dir, "bridgehead.yaml", catalog.Local{Listen: "127.1.0.1:51820",
		ControlSocket: filepath.Join(o.Dir, "bridgehead.sock"), Interface: "bhr0"})
	if err != nil {
		return nil, err
	}
	ns := o.Namespace
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.CommandContext(ctx, "ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lo up: %v: %s", err, out)
	}
	loadavg, _ := os.ReadFile("/proc/loadavg")
	rep := &ReloadReport{Prefixes: cat.PrefixCount(), Peers: (o.Sites - 1) * o.Gateways, LoadAvg: strings.TrimSpace(string(loadavg))}
	logPath := filepath.Join(o.Dir, "bridgehead.log")
	os.Remove(logPath)
	gw, err := startGateway(ctx, o.Binary, ns, cfg, logPath, filepath.Join(o.Dir, "cpu.prof"))
	if err != nil {
		return nil, err
	}
	defer gw.stop()
	pid := gw.pid()

	startLine, err := waitLog(ctx, logPath, "starting bridgehead", time.Time{}, o.Timeout)
	if err != nil {
		return rep, err
	}
	up, err := waitLog(ctx, logPath, "gateway up", time.Time{}, o.Timeout)
	if err != nil {
		return rep, err
	}
	rep.StartupSeconds = up.Time.Sub(startLine.Time).Seconds()
	rep.TunnelRoutes = up.TunnelRoutes
	rep.StartupCPUSeconds, _ = procCPU(pid)
	rep.RSSMiBUp = procRSS(pid)
	o.Progress("%d prefixes: up in %.2f s (%.2f s CPU), %d tunnel routes, RSS %.0f MiB", rep.Prefixes, rep.StartupSeconds, rep.StartupCPUSeconds, rep.TunnelRoutes, rep.RSSMiBUp)
	if rep.IdleCPUPercent, err = idleCPU(ctx, pid, o.Idle); err != nil {
		return rep, err
	}

	change := func(n int) error {
		f, err := os.OpenFile(cfg, os.O_APPEND|os.O_WRONLY, 0)
		if err != nil {
			return err
		}
		fmt.Fprintf(f, "# change %d\n", n)
		return f.Close()
	}
	t := time.Now()
	if err := change(0); err != nil {
		return rep, err
	}
	r, err := waitLog(ctx, logPath, "config reloaded", t, o.Timeout)
	if err != nil {
		return rep, fmt.Errorf("watcher reload: %w", err)
	}
	rep.WatchReloadSeconds = r.Time.Sub(t).Seconds()
	for i := range o.Reloads {
		time.Sleep(time.Second) // past the watcher's debounce of the previous change
		c0, _ := procCPU(pid)
		if err := change(i + 1); err != nil {
			return rep, err
		}
		t := time.Now()
		if err := syscall.Kill(pid, syscall.SIGHUP); err != nil {
			return rep, err
		}
		r, err := waitLog(ctx, logPath, "config reloaded", t, o.Timeout)
		if err != nil {
			return rep, fmt.Errorf("reload %d: %w", i+1, err)
		}
		c1, _ := procCPU(pid)
		rep.ReloadSeconds = append(rep.ReloadSeconds, r.Time.Sub(t).Seconds())
		rep.ReloadCPUSeconds = append(rep.ReloadCPUSeconds, c1-c0)
	}
	time.Sleep(time.Second) // the watcher's reload of the last change (a no-op by hash) passes
	rep.RSSMiBAfter = procRSS(pid)
	if rep.IdleCPUPercentAfter, err = idleCPU(ctx, pid, o.Idle); err != nil {
		return rep, err
	}
	o.Progress("%d prefixes: reloads %v s (CPU %v s), watcher reload %.2f s, RSS after %.0f MiB, idle %.2f %% / %.2f %%",
		rep.Prefixes, rep.ReloadSeconds, rep.ReloadCPUSeconds, rep.WatchReloadSeconds, rep.RSSMiBAfter, rep.IdleCPUPercent, rep.IdleCPUPercentAfter)
	return rep, nil
}

// logLine is the part of a JSON log line waitLog reads.
type logLine struct {
	Time         time.Time `json:"time"`
	Msg          string    `json:"msg"`
	TunnelRoutes int       `json:"tunnel_routes"`
}

// waitLog polls the gateway's JSON log for a line with msg logged at or
// after since.
func waitLog(ctx context.Context, path, msg string, since time.Time, timeout time.Duration) (logLine, error) {
	deadline := time.Now().Add(timeout)
	for {
		if f, err := os.Open(path); err == nil {
			sc := bufio.NewScanner(f)
			sc.Buffer(make([]byte, 64<<10), 1<<20)
			for sc.Scan() {
				var l logLine
				if json.Unmarshal(sc.Bytes(), &l) == nil && l.Msg == msg && !l.Time.Before(since) {
					f.Close()
					return l, nil
				}
			}
			f.Close()
		}
		if time.Now().After(deadline) {
			return logLine{}, fmt.Errorf("no %q in %s within %v", msg, path, timeout)
		}
		select {
		case <-ctx.Done():
			return logLine{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// procCPU is the CPU time of process pid in seconds.
func procCPU(pid int) (float64, error) {
	fs, err := procfs.New(procfs.DefaultMount)
	if err != nil {
		return 0, err
	}
	return fs.ProcessCPU(pid)
}

// procRSS is the resident memory of process pid in MiB, 0 when unknown.
func procRSS(pid int) float64 {
	fs, err := procfs.New(procfs.DefaultMount)
	if err != nil {
		return 0
	}
	rss, _, err := fs.ProcessMemory(pid)
	if err != nil {
		return 0
	}
	return float64(rss) / 1024
}

func idleCPU(ctx context.Context, pid int, d time.Duration) (float64, error) {
	c0, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	c1, err := procCPU(pid)
	if err != nil {
		return 0, err
	}
	return 100 * (c1 - c0) / time.Since(t0).Seconds(), nil
}
