package flood

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/iperf"
	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
	"github.com/bridgehead/bridgehead/bench/internal/results"
)

// Run builds the topology with a flood namespace, starts bridgehead,
// and measures the phases of floodPhases in order. Every namespace and
// process it starts is gone when it returns.
func Run(ctx context.Context, cfg Config) (rep *Report, err error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Batch < 1 {
		cfg.Batch = 64
	}
	v := modes.Variant{Mode: modes.Bridgehead, Cipher: cfg.Cipher, ExpressPriority: modes.ExpressDefault}
	rep = &Report{
		Measurement: "flood",
		Started:     time.Now().UTC().Format(time.RFC3339),
		Host:        results.HostInfo(cfg.Tools.Bridgehead, cfg.Tools.Iperf3, ""),
		Settings: Settings{
			Variant: v.String(), DurationS: cfg.Duration.Seconds(), LeadS: Lead.Seconds(),
			TargetPPS: cfg.PPS, Batch: cfg.Batch, FloodFrom: lab.FloodSrc, FloodTo: lab.WANB + ":51820",
			TunMTU: cfg.TunMTU, WANMTU: cfg.WANMTU, Control: cfg.Control,
		},
	}
	defer func() {
		if ctx.Err() != nil {
			rep.Interrupted = true
		}
		rep.Finished = time.Now().UTC().Format(time.RFC3339)
		rep.Evaluate()
	}()
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Progress, "   "+format+"\n", a...) }
	proc, err := procfs.New(procfs.DefaultMount)
	if err != nil {
		return rep, err
	}
	t := &lab.Topology{
		Prefix: cfg.Prefix,
		WANMTU: cfg.WANMTU,
		Dir:    filepath.Join(cfg.OutDir, "work", "flood"),
		Flood:  true,
	}
	if cfg.Verbose {
		t.Log = cfg.Progress
	}
	defer func() {
		if derr := t.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	fmt.Fprintf(cfg.Progress, "== flood: %s\n", v)
	say("building topology %s-{a-node,a-gw,b-gw,b-node,flood}", t.Prefix)
	if err := t.Up(ctx); err != nil {
		return rep, err
	}
	say("starting %s", v)
	gw, err := modes.Start(ctx, t, v, cfg.Tools, cfg.TunMTU)
	if err != nil {
		return rep, err
	}
	if err := iperf.Serve(ctx, t, cfg.Tools.Iperf3); err != nil {
		return rep, err
	}
	// Warm-up, not reported: the first stream finds the tunnel's path
	// MTU (the pods have 1500) and the gateways grow their buffers; the
	// baseline should not carry either.
	say("warming up: TCP 1 stream pod A -> pod B (2s), not reported")
	if _, err := iperf.Client(ctx, t, []string{cfg.Tools.Iperf3, "-c", lab.PodB.String(), "-B", lab.PodA.String(), "-p", "5201", "-t", "2", "-J"}, 2*time.Second); err != nil {
		return rep, fmt.Errorf("warm-up: %w", err)
	}
	for _, p := range floodPhases(cfg.Control) {
		ph, err := floodPhase(ctx, cfg, proc, t, gw, p, say)
		if err != nil {
			ph.Error = err.Error()
		}
		rep.Phases = append(rep.Phases, ph)
		if err != nil {
			return rep, fmt.Errorf("%s: %w", p.name, err)
		}
	}
	return rep, nil
}

// floodPhase measures one TCP stream, with a flood of kind around it
// unless kind is "".
func floodPhase(ctx context.Context, cfg Config, proc procfs.FS, t *lab.Topology, gw modes.Gateways, def floodPhaseDef, say func(string, ...any)) (Phase, error) {
	kind := def.kind
	ph := Phase{Name: def.name, Kind: kind}
	to := fmt.Sprintf("%s:%d", lab.WANB, def.port)
	gwB := gw.B
	d := cfg.Duration
	secs := strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
	before, err := snapshotGateway(ctx, proc, t, gw)
	if err != nil {
		return ph, err
	}
	var worker *lab.Proc
	if kind != "" {
		say("flooding gateway B %s with %s at %.0f packets/s from %s", to, kind, cfg.PPS, t.NS(lab.Flood))
		worker, err = t.Start("flood-"+def.name, lab.Flood, nil, cfg.Worker, "flood-worker",
			"-to", to, "-kind", kind, "-pps", strconv.FormatFloat(cfg.PPS, 'f', -1, 64),
			"-batch", strconv.Itoa(cfg.Batch), "-duration", (d + 2*Lead).String())
		if err != nil {
			return ph, err
		}
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-time.After(Lead):
		}
		if done, perr := worker.Exited(); done {
			return ph, fmt.Errorf("flood worker exited early: %v\n%s", perr, worker.LogTail())
		}
	}
	// Gateway B's resident memory every 100 ms while the stream runs.
	peak := before.rssKiB
	stopSampling := make(chan struct{})
	var sampling sync.WaitGroup
	sampling.Add(1)
	go func() {
		defer sampling.Done()
		tick := time.NewTicker(100 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-stopSampling:
				return
			case <-tick.C:
				if rss, _, err := proc.ProcessMemory(gwB.PID()); err == nil {
					peak = max(peak, rss)
				}
			}
		}
	}()
	say("measuring TCP 1 stream pod A -> pod B (%ss)%s", secs, map[bool]string{true: " under the flood", false: ""}[kind != ""])
	r, ierr := iperf.Client(ctx, t, []string{cfg.Tools.Iperf3, "-c", lab.PodB.String(), "-B", lab.PodA.String(), "-p", "5201", "-t", secs, "-J"}, d)
	if worker != nil {
		if err := lab.WaitFor(ctx, d+2*Lead+30*time.Second, func() (bool, error) {
			done, _ := worker.Exited()
			return done, nil
		}); err != nil {
			ierr = errors.Join(ierr, fmt.Errorf("flood worker did not stop: %w", err))
		} else {
			out, _ := os.ReadFile(worker.Log)
			fr, err := flooder.ParseResult(out)
			if err != nil {
				ierr = errors.Join(ierr, fmt.Errorf("%w\n%s", err, worker.LogTail()))
			} else {
				ph.Flood = &fr
			}
		}
	}
	// Let the gateway drain its socket before reading its counters.
	time.Sleep(500 * time.Millisecond)
	close(stopSampling)
	sampling.Wait()
	after, err := snapshotGateway(ctx, proc, t, gw)
	if err != nil {
		return ph, errors.Join(ierr, err)
	}
	if done, perr := gwB.Exited(); done {
		return ph, fmt.Errorf("%s exited during the measurement: %v\n%s", gwB.Name, perr, gwB.LogTail())
	}
	if ierr != nil {
		return ph, ierr
	}
	ph.TCPMbps = r.BitsPerSecond / 1e6
	ph.Retransmits = r.Retransmits
	fillDeltas(&ph, before, after, peak)
	say("  %.0f Mbit/s (%.0f retransmits); gateway B VmRSS %.1f -> %.1f MiB (peak %.1f); CPU gateway A %.0f%%, B %.0f%% of a core, machine %.0f%% busy",
		ph.TCPMbps, ph.Retransmits, kib2mib(ph.RSSBeforeKiB), kib2mib(ph.RSSAfterKiB), kib2mib(ph.RSSPeakKiB), ph.GatewayACPUPct, ph.GatewayCPUPct, ph.MachineBusyPct)
	if f := ph.Flood; f != nil {
		say("  flooder: %d datagrams in %.2f s = %.0f packets/s (%d send errors, %d skipped while not running), CPU %.0f%% of a core",
			f.Sent, f.Seconds, f.PPS, f.SendErrors, f.Behind, f.CPUPct())
		var ds []string
		for _, k := range slices.Sorted(maps.Keys(ph.Drops)) {
			if ph.Drops[k] > 0 {
				ds = append(ds, fmt.Sprintf("%s %.0f", k, ph.Drops[k]))
			}
		}
		say("  gateway B dropped: %s; DH operations %.0f, cookie replies %.0f; socket overflows %.0f",
			strings.Join(ds, ", "), ph.DHOps, ph.CookieReplies, ph.UDP["RcvbufErrors"])
	}
	return ph, nil
}

func kib2mib(k int64) float64 { return float64(k) / 1024 }
