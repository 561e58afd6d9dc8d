// Package scale measures one real `bridgehead run` against a farm of
// hundreds of remote gateways (issue #14): its idle cost (CPU and WAN
// packets/s with every session up and no traffic) and the handshake storm
// when it restarts (time until every session is back, and whether the
// peers refused any handshake). The gateway runs in a network namespace
// the harness creates; the farm (Farm) runs in the harness's process with
// its sockets in that namespace, all on loopback addresses.
//
// Run needs root (namespaces, TUN). Command bench/cmd/bhscale drives it.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/bridgehead/bridgehead/bench/catalog"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
	"github.com/bridgehead/bridgehead/control"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// Options shape a measurement. Zero values take the defaults noted.
type Options struct {
	Binary   string // the bridgehead binary (required)
	Peers    int    // remote gateways (default 600)
	Gateways int    // per site (default 3); sites = 1 + Peers/Gateways
	Prefixes int    // pod prefixes in the catalog (default 20,000)
	// Keepalive of every site, on both sides (default 25 s, the README's
	// recommendation; negative for none).
	Keepalive time.Duration
	Idle      time.Duration // length of the idle measurement (default 60 s)
	Settle    time.Duration // wait after convergence before measuring idle (default 5 s)
	Restarts  int           // restarts measured (default 3)
	Timeout   time.Duration // longest wait for sessions (default 180 s)
	Dir       string        // work directory (default a new one in /tmp)
	// CPUProfile, when set, is passed to the first gateway's --cpuprofile:
	// it covers start-up, first handshakes and the idle window.
	CPUProfile string
	Progress   io.Writer // progress lines (nil: none)
}

func (o *Options) defaults() error {
	if o.Binary == "" {
		return errors.New("scale: no bridgehead binary")
	}
	if o.Peers == 0 {
		o.Peers = 600
	}
	if o.Gateways == 0 {
		o.Gateways = 3
	}
	if o.Peers%o.Gateways != 0 {
		return fmt.Errorf("scale: %d peers is not a multiple of %d gateways per site", o.Peers, o.Gateways)
	}
	if o.Prefixes == 0 {
		o.Prefixes = 20_000
	}
	if o.Keepalive == 0 {
		o.Keepalive = 25 * time.Second
	} else if o.Keepalive < 0 {
		o.Keepalive = 0
	}
	if o.Idle == 0 {
		o.Idle = 60 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 5 * time.Second
	}
	if o.Restarts == 0 {
		o.Restarts = 3
	}
	if o.Timeout == 0 {
		o.Timeout = 180 * time.Second
	}
	return nil
}

// Report is the outcome of Run.
type Report struct {
	Peers, Sites, Prefixes int
	Keepalive              time.Duration
	LoadAvg                string // /proc/loadavg when the run began

	// StartupSeconds: exec to a working control socket (routes, TUN, sockets up).
	StartupSeconds float64
	// FirstSessionsSeconds: exec until the gateway has a session with every peer.
	FirstSessionsSeconds float64

	Idle     IdleFigures
	Restarts []Restart
}

// IdleFigures are the gateway's cost with every session up and no traffic.
type IdleFigures struct {
	Seconds float64
	// CPUPercent of one core (utime+stime of the gateway process).
	CPUPercent float64
	// WANPacketsPerSecond: datagrams the gateway sent plus received
	// (every UDP datagram in the namespace has the gateway at one end).
	WANPacketsPerSecond float64
	// TransportFromGateway: transport messages (data and keepalives, no
	// handshakes) the farm received from the gateway, per second.
	TransportFromGateway float64
	RSSMiB               float64
	// Handshakes completed by the farm during the window, and how many
	// of them the farm initiated and answered (rekeys, or sessions
	// replaced for want of an answer).
	Handshakes, FarmInitiated, FarmAnswered uint64
}

// Restart is one handshake storm.
type Restart struct {
	// UpSeconds: exec to a working control socket.
	UpSeconds float64
	// AllSessionsSeconds: exec until the gateway reports a session
	// created after the restart with every peer (control socket).
	AllSessionsSeconds float64
	// FarmSessionsSeconds: exec until every farm router has one.
	FarmSessionsSeconds float64
	// Sessions the gateway had when the wait ended (== Peers on success).
	Sessions int
	// FarmDrops: the farm's drop counters over the storm (a peer's
	// handshake rate limit shows here as handshake_rate_limited or
	// similar), FarmHandshakes its completed handshakes.
	FarmDrops      map[string]uint64
	FarmHandshakes uint64
	// GatewayDrops: the restarted gateway's nonzero drop counters.
	GatewayDrops map[string]uint64
}

// Run measures. It creates and removes its namespace and stops the
// gateway it started.
func Run(ctx context.Context, o Options) (rep *Report, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	say := func(format string, args ...any) {
		if o.Progress != nil {
			fmt.Fprintf(o.Progress, "%s "+format+"\n", append([]any{time.Now().Format("15:04:05")}, args...)...)
		}
	}
	sites := 1 + o.Peers/o.Gateways
	cat, err := catalog.New(catalog.Options{Sites: sites, Gateways: o.Gateways, Prefixes: o.Prefixes,
		EndpointBase: netip.MustParseAddr("127.1.0.1"), Port: 51820, Keepalive: o.Keepalive})
	if err != nil {
		return nil, err
	}
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "bhscale"); err != nil {
			return nil, err
		}
	} else if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	ns := fmt.Sprintf("bhscale%d", os.Getpid())
	if out, err := exec.CommandContext(ctx, "ip", "netns", "add", ns).CombinedOutput(); err != nil {
		return nil, fmt.Errorf("ip netns add %s: %v: %s", ns, err, out)
	}
	defer exec.Command("ip", "netns", "del", ns).Run()
	if out, err := exec.CommandContext(ctx, "ip", "-n", ns, "link", "set", "lo", "up").CombinedOutput(); err != nil {
		return nil, fmt.Errorf("lo up: %v: %s", err, out)
	}
	sock := filepath.Join(o.Dir, "bridgehead.sock")
	target := cat.Sites[0].Gateways[0]
	cfgPath, err := cat.Write(o.Dir, "bridgehead.yaml", catalog.Local{
		Listen: target.Endpoint.String(), ControlSocket: sock, Interface: "bhs0"})
	if err != nil {
		return nil, err
	}
	say("catalog %s: %d sites x %d gateways, %d prefixes; namespace %s", cfgPath, sites, o.Gateways, cat.PrefixCount(), ns)

	farm, err := NewFarm(FarmOptions{Catalog: cat, Local: 0, Target: 0, Netns: ns, Keepalive: o.Keepalive,
		Cipher: bhcrypto.AESGCM, Cluster: "scale"})
	if err != nil {
		return nil, err
	}
	fctx, stopFarm := context.WithCancel(ctx)
	farmDone := make(chan error, 1)
	go func() { farmDone <- farm.Run(fctx) }()
	defer func() {
		stopFarm()
		if ferr := <-farmDone; ferr != nil && err == nil {
			err = fmt.Errorf("farm: %w", ferr)
		}
	}()

	loadavg, _ := os.ReadFile("/proc/loadavg")
	rep = &Report{Peers: o.Peers, Sites: sites, Prefixes: cat.PrefixCount(), Keepalive: o.Keepalive,
		LoadAvg: strings.TrimSpace(string(loadavg))}
	logPath := filepath.Join(o.Dir, "bridgehead.log") // next to the config, as operators do
	gw, err := startGateway(ctx, o.Binary, ns, cfgPath, logPath, o.CPUProfile)
	if err != nil {
		return nil, err
	}
	defer func() { gw.stop() }()
	first, err := waitSessions(ctx, sock, gw.started, o.Peers, o.Timeout, farm)
	if err != nil {
		return rep, err
	}
	rep.StartupSeconds, rep.FirstSessionsSeconds = first.up, first.all
	say("gateway up in %.2f s, sessions with all %d peers after %.2f s", first.up, o.Peers, first.all)

	select {
	case <-time.After(o.Settle):
	case <-ctx.Done():
		return rep, ctx.Err()
	}
	say("idle: measuring for %v", o.Idle)
	if rep.Idle, err = measureIdle(ctx, gw.pid(), o.Idle, farm); err != nil {
		return rep, err
	}
	say("idle: %.2f %% CPU, %.1f WAN packets/s (%.1f transport messages/s from the gateway), %d handshakes, RSS %.0f MiB",
		rep.Idle.CPUPercent, rep.Idle.WANPacketsPerSecond, rep.Idle.TransportFromGateway, rep.Idle.Handshakes, rep.Idle.RSSMiB)

	for i := range o.Restarts {
		if err := gw.stop(); err != nil {
			return rep, fmt.Errorf("stop gateway: %w", err)
		}
		before := farm.Counters()
		if gw, err = startGateway(ctx, o.Binary, ns, cfgPath, logPath, ""); err != nil {
			return rep, err
		}
		w, err := waitSessions(ctx, sock, gw.started, o.Peers, o.Timeout, farm)
		r := Restart{UpSeconds: w.up, AllSessionsSeconds: w.all, FarmSessionsSeconds: w.farm, Sessions: w.sessions,
			GatewayDrops: w.drops}
		d := farm.Counters().Sub(before)
		r.FarmDrops, r.FarmHandshakes = d.Drops, d.HandshakesCompleted
		rep.Restarts = append(rep.Restarts, r)
		if err != nil {
			return rep, fmt.Errorf("restart %d: %w", i+1, err)
		}
		say("restart %d: up %.2f s, all %d sessions back after %.2f s (farm side %.2f s); farm drops %v",
			i+1, r.UpSeconds, o.Peers, r.AllSessionsSeconds, r.FarmSessionsSeconds, r.FarmDrops)
	}
	return rep, nil
}

// gatewayProc is one `bridgehead run` in the namespace.
type gatewayProc struct {
	cmd     *exec.Cmd
	started time.Time
	done    chan error
	stopped bool
}

func startGateway(ctx context.Context, bin, ns, cfg, logPath, profile string) (*gatewayProc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	// `ip netns exec` execs the binary: the PID is the gateway's.
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "run", "-config", cfg, "-log-format", "json")
	if profile != "" {
		cmd.Args = append(cmd.Args, "-cpuprofile", profile)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	g := &gatewayProc{cmd: cmd, done: make(chan error, 1)}
	g.started = time.Now()
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	go func() { g.done <- cmd.Wait(); logf.Close() }()
	return g, nil
}

func (g *gatewayProc) pid() int { return g.cmd.Process.Pid }

// stop sends SIGTERM and waits (SIGKILL after 30 s). Idempotent.
func (g *gatewayProc) stop() error {
	if g.stopped {
		return nil
	}
	g.stopped = true
	g.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-g.done:
		var ee *exec.ExitError
		if errors.As(err, &ee) && ee.ExitCode() != 0 {
			return fmt.Errorf("gateway exited with %v", err)
		}
		return nil
	case <-time.After(30 * time.Second):
		g.cmd.Process.Kill()
		<-g.done
		return errors.New("gateway did not stop within 30 s of SIGTERM; killed")
	}
}

type waited struct {
	up, all, farm float64
	sessions      int
	drops         map[string]uint64
}

// waitSessions polls the control socket (what `bridgehead status --json`
// reads) until the gateway has a session created after since with every
// peer, and the farm until every router has one with the gateway.
func waitSessions(ctx context.Context, sock string, since time.Time, peers int, timeout time.Duration, farm *Farm) (waited, error) {
	var w waited
	deadline := time.Now().Add(timeout)
	for {
		now := time.Now()
		if now.After(deadline) {
			return w, fmt.Errorf("after %v: gateway has sessions with %d of %d peers, farm %d", timeout, w.sessions, peers, farm.Sessions(since))
		}
		fctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := control.Fetch(fctx, sock)
		cancel()
		if err == nil {
			if w.up == 0 {
				w.up = time.Since(since).Seconds()
			}
			n := 0
			for _, p := range st.Peers {
				if !p.SessionCreated.IsZero() && !p.SessionCreated.Before(since) {
					n++
				}
			}
			w.sessions = n
			if n == peers && w.all == 0 {
				w.all = time.Since(since).Seconds()
				w.drops = map[string]uint64{}
				for _, d := range st.Drops {
					w.drops[d.Direction+"/"+d.Reason] = d.Count
				}
			}
		}
		if w.farm == 0 && farm.Sessions(since) == peers {
			w.farm = time.Since(since).Seconds()
		}
		if w.all > 0 && w.farm > 0 {
			return w, nil
		}
		select {
		case <-ctx.Done():
			return w, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// measureIdle samples the gateway's CPU time, its namespace's UDP
// counters and the farm's counters over d.
func measureIdle(ctx context.Context, pid int, d time.Duration, farm *Farm) (IdleFigures, error) {
	type sample struct {
		t        time.Time
		cpu      float64
		udpOut   float64
		counters FarmCounters
	}
	take := func() (sample, error) {
		s := sample{t: time.Now(), counters: farm.Counters()}
		fs, err := procfs.New(procfs.DefaultMount)
		if err != nil {
			return s, err
		}
		if s.cpu, err = fs.ProcessCPU(pid); err != nil {
			return s, err
		}
		// The gateway's /proc/PID/net is its namespace's.
		udp, err := fs.ProcessUDP(pid)
		if err != nil {
			return s, err
		}
		s.udpOut = udp.OutDatagrams
		return s, nil
	}
	a, err := take()
	if err != nil {
		return IdleFigures{}, err
	}
	select {
	case <-time.After(d):
	case <-ctx.Done():
		return IdleFigures{}, ctx.Err()
	}
	b, err := take()
	if err != nil {
		return IdleFigures{}, err
	}
	secs := b.t.Sub(a.t).Seconds()
	diff := b.counters.Sub(a.counters)
	f := IdleFigures{
		Seconds:              secs,
		CPUPercent:           100 * (b.cpu - a.cpu) / secs,
		WANPacketsPerSecond:  (b.udpOut - a.udpOut) / secs,
		TransportFromGateway: float64(diff.RxPackets) / secs,
		Handshakes:           diff.HandshakesCompleted,
		FarmInitiated:        diff.HandshakesInitiated,
		FarmAnswered:         diff.HandshakesAnswered,
	}
	f.RSSMiB = procRSS(pid)
	return f, nil
}

// Markdown renders the report as the table the issue asks for.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Gateway with %d remote gateways (%d sites, %d prefixes), keepalive %v; load average at start: %s\n\n",
		r.Peers, r.Sites, r.Prefixes, r.Keepalive, r.LoadAvg)
	fmt.Fprintf(&b, "| figure | value |\n|---|---|\n")
	fmt.Fprintf(&b, "| start-up (exec to control socket) | %.2f s |\n", r.StartupSeconds)
	fmt.Fprintf(&b, "| first sessions with all peers (from exec) | %.2f s |\n", r.FirstSessionsSeconds)
	fmt.Fprintf(&b, "| idle CPU (%.0f s) | %.2f %% of a core |\n", r.Idle.Seconds, r.Idle.CPUPercent)
	fmt.Fprintf(&b, "| idle WAN packets/s (sent+received) | %.1f (of which %.1f/s transport messages from the gateway) |\n",
		r.Idle.WANPacketsPerSecond, r.Idle.TransportFromGateway)
	fmt.Fprintf(&b, "| idle RSS | %.0f MiB |\n", r.Idle.RSSMiB)
	fmt.Fprintf(&b, "| handshakes completed while idle | %d (%.1f/s; farm initiated %d, answered %d) |\n",
		r.Idle.Handshakes, float64(r.Idle.Handshakes)/max(r.Idle.Seconds, 1), r.Idle.FarmInitiated, r.Idle.FarmAnswered)
	var all []float64
	for i, x := range r.Restarts {
		all = append(all, x.AllSessionsSeconds)
		fmt.Fprintf(&b, "| restart %d: up / all sessions back (gateway, farm) | %.2f s / %.2f s, %.2f s; farm drops %v; gateway drops %v |\n",
			i+1, x.UpSeconds, x.AllSessionsSeconds, x.FarmSessionsSeconds, x.FarmDrops, x.GatewayDrops)
	}
	if len(all) > 0 {
		slices.Sort(all)
		fmt.Fprintf(&b, "| restart: all sessions back, median of %d | %.2f s |\n", len(all), all[len(all)/2])
	}
	return b.String()
}
