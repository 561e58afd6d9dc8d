package compare

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/bench/internal/iperf"
	"github.com/bridgehead/bridgehead/bench/internal/lab"
	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/ping"
	"github.com/bridgehead/bridgehead/bench/internal/procfs"
	"github.com/bridgehead/bridgehead/bench/internal/results"
	"github.com/bridgehead/bridgehead/bench/internal/sched"
	"github.com/bridgehead/bridgehead/bench/internal/stats"
	"github.com/bridgehead/bridgehead/bench/internal/udprr"
)

// The UDP request/response series run during the one-stream test: 64-byte
// requests at 100 Hz, like small API calls or health checks.
const (
	rrPort     = 7007
	rrSize     = 64
	rrInterval = 10 * time.Millisecond
)

// Run runs the benchmark and returns its report, complete or as far as it
// got (ctx cancelled, a variant failing). Every namespace and process it
// starts is gone when it returns.
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Runs < 1 {
		cfg.Runs = 1
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	rep := &Report{
		Started:  time.Now().UTC().Format(time.RFC3339),
		Host:     results.HostInfo(cfg.Tools.Bridgehead, cfg.Tools.Iperf3, cfg.Tools.WireguardGo),
		Settings: settingsOf(cfg),
	}
	for _, v := range cfg.Variants {
		rep.Variants = append(rep.Variants, v.String())
	}
	var errs []error
	for run := 1; run <= cfg.Runs; run++ {
		// Interleave: every variant once per run, the starting variant
		// rotating so that none is always measured first or last.
		n := len(cfg.Variants)
		for i := range n {
			v := cfg.Variants[(i+run-1)%n]
			if ctx.Err() != nil {
				break
			}
			fmt.Fprintf(cfg.Progress, "== run %d/%d: %s\n", run, cfg.Runs, v)
			s, err := runOne(ctx, cfg, v, run)
			if err != nil {
				s.Error = err.Error()
				errs = append(errs, fmt.Errorf("%s run %d: %w", v, run, err))
				fmt.Fprintf(cfg.Progress, "   FAILED: %v\n", err)
			}
			rep.Samples = append(rep.Samples, s)
		}
	}
	if ctx.Err() != nil {
		rep.Interrupted = true
		errs = append(errs, ctx.Err())
	}
	rep.Finished = time.Now().UTC().Format(time.RFC3339)
	rep.Summarize()
	return rep, errors.Join(errs...)
}

// runOne builds a fresh topology, starts variant v, measures, tears down.
func runOne(ctx context.Context, cfg Config, v modes.Variant, run int) (s Sample, err error) {
	s = Sample{Variant: v.String(), Run: run, Values: map[string]float64{}}
	say := func(format string, a ...any) { fmt.Fprintf(cfg.Progress, "   "+format+"\n", a...) }
	t := &lab.Topology{
		Prefix: cfg.Prefix,
		WANMTU: cfg.WANMTU,
		Dir:    filepath.Join(cfg.OutDir, "work", fmt.Sprintf("%s-run%d", v, run)),
	}
	if cfg.Verbose {
		t.Log = cfg.Progress
	}
	defer func() {
		if derr := t.Down(); derr != nil {
			err = errors.Join(err, fmt.Errorf("teardown: %w", derr))
		}
	}()
	say("building topology %s-{a-node,a-gw,b-gw,b-node}", t.Prefix)
	if err := t.Up(ctx); err != nil {
		return s, err
	}
	say("starting %s", v)
	gw, err := modes.Start(ctx, t, v, cfg.Tools, cfg.TunMTU)
	if err != nil {
		return s, err
	}
	if err := iperf.Serve(ctx, t, cfg.Tools.Iperf3); err != nil {
		return s, err
	}
	if !cfg.GatewaySched.IsZero() {
		stopSched, err := keepSched(cfg.GatewaySched, gw, say)
		if err != nil {
			return s, err
		}
		// Before t.Down (deferred earlier) stops the gateways.
		defer func() {
			if serr := stopSched(); serr != nil && err == nil {
				err = serr
			}
		}()
	}

	d := cfg.Duration
	secs := strconv.Itoa(max(1, int(math.Ceil(d.Seconds()))))
	base := []string{cfg.Tools.Iperf3, "-c", lab.PodB.String(), "-B", lab.PodA.String(), "-p", "5201", "-t", secs, "-J"}
	runClient := func(extra ...string) (iperf.Result, error) {
		return iperf.Client(ctx, t, append(append([]string{}, base...), extra...), d)
	}
	proc, err := procfs.New(procfs.DefaultMount)
	if err != nil {
		return s, err
	}
	cpu := newCPUMeter(proc, gw)
	counters := newGWCounters(ctx, t, v, say)
	checkGW := func() error {
		for _, p := range []*lab.Proc{gw.A, gw.B} {
			if p == nil {
				continue
			}
			if done, perr := p.Exited(); done {
				return fmt.Errorf("%s exited during the measurement: %v\n%s", p.Name, perr, p.LogTail())
			}
		}
		return nil
	}

	// 1. ICMP round-trip time, idle.
	say("measuring ICMP RTT idle (%s, every %s)", d, cfg.PingInterval)
	pr, err := ping.Run(ctx, t.NS(lab.ANode), lab.PodA, lab.PodB, cfg.PingInterval, d)
	if err != nil {
		return s, err
	}
	s.Values[MRTTIdle50] = stats.Percentile(pr.RTTs, 50)
	s.Values[MRTTIdle99] = stats.Percentile(pr.RTTs, 99)
	say("  p50 %.3f ms, p99 %.3f ms (%d/%d replies)", s.Values[MRTTIdle50], s.Values[MRTTIdle99], len(pr.RTTs), pr.Sent)

	// 2. TCP one stream A→B, with ICMP RTT under that load.
	say("measuring TCP 1 stream pod A -> pod B (%ss) with ICMP RTT under load", secs)
	cpu.start()
	var (
		wg     sync.WaitGroup
		lr     ping.Result
		rr     udprr.Result
		lerr   error
		rerr   error
		loaded = max(d-time.Second, time.Second)
	)
	// whenLoaded runs probe half a second into the bulk flow, unless ctx
	// ends first.
	whenLoaded := func(probe func()) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case <-time.After(500 * time.Millisecond):
				probe()
			case <-ctx.Done():
			}
		}()
	}
	whenLoaded(func() {
		lr, lerr = ping.Run(ctx, t.NS(lab.ANode), lab.PodA, lab.PodB, cfg.PingInterval, loaded)
	})
	// A 100 Hz UDP request/response between two other pods of the same
	// sites (another flow than the bulk one and the ping).
	whenLoaded(func() {
		rr, rerr = udprr.Run(ctx, udprr.Spec{
			ClientNS: t.NS(lab.ANode), ServerNS: t.NS(lab.BNode),
			Src: lab.PodA2, Dst: lab.PodB2, Port: rrPort, Size: rrSize,
			Interval: rrInterval, Duration: loaded,
		})
	})
	r, err := runClient()
	wg.Wait()
	if err != nil {
		return s, err
	}
	if lerr != nil {
		return s, lerr
	}
	if rerr != nil {
		return s, rerr
	}
	setLoaded(s.Values, [5]string{MRRLoad50, MRRLoad99, MRRLoadK50, MRRLoadK99, MRRLoadLoss}, rr.RTTs, rr.KernelRTTs, rr.Sent, rr.Lost())
	cpu.stop(r.Bytes)
	s.Values[MTCP1] = r.BitsPerSecond / 1e6
	s.Values[MRetransmits] = r.Retransmits
	setLoaded(s.Values, [5]string{MRTTLoad50, MRTTLoad99, MRTTLoadK50, MRTTLoadK99, MRTTLoadLoss}, lr.RTTs, lr.KernelRTTs, lr.Sent, lr.Lost())
	say("  %.0f Mbit/s (%.0f retransmits); RTT under load p50 %.3f ms, p99 %.3f ms (%d/%d replies; kernel-stamped %.3f, %.3f); UDP request/response p50 %.3f ms, p99 %.3f ms (%d/%d; kernel-stamped %.3f, %.3f)",
		s.Values[MTCP1], r.Retransmits, s.Values[MRTTLoad50], s.Values[MRTTLoad99], len(lr.RTTs), lr.Sent, s.Values[MRTTLoadK50], s.Values[MRTTLoadK99],
		s.Values[MRRLoad50], s.Values[MRRLoad99], len(rr.RTTs), rr.Sent, s.Values[MRRLoadK50], s.Values[MRRLoadK99])
	if err := checkGW(); err != nil {
		return s, err
	}
	if !cfg.GatewaySched.IsZero() {
		s.GatewaySched = schedCounts(cfg.GatewaySched, gw)
		say("  threads under %s: %s", cfg.GatewaySched, strings.Join(s.GatewaySched, ", "))
	}

	// 3. TCP N streams A→B.
	say("measuring TCP %d streams pod A -> pod B (%ss)", cfg.Streams, secs)
	counters.startN()
	cpu.start()
	if r, err = runClient("-P", strconv.Itoa(cfg.Streams)); err != nil {
		return s, err
	}
	cpu.stop(r.Bytes)
	counters.stopN(s.Values)
	s.Values[MTCPN] = r.BitsPerSecond / 1e6
	say("  %.0f Mbit/s", s.Values[MTCPN])

	// 4. TCP one stream B→A (reverse).
	say("measuring TCP 1 stream reverse, pod B -> pod A (%ss)", secs)
	cpu.start()
	if r, err = runClient("-R"); err != nil {
		return s, err
	}
	cpu.stop(r.Bytes)
	s.Values[MTCPRev] = r.BitsPerSecond / 1e6
	say("  %.0f Mbit/s", s.Values[MTCPRev])
	if err := checkGW(); err != nil {
		return s, err
	}
	cpu.report(s.Values)
	counters.strays(s.Values)
	say("  gateway CPU per GB over the TCP tests: A %s, B %s; machine softirq %s",
		fmtOpt(s.Values, MCPUA, "%.2f s"), fmtOpt(s.Values, MCPUB, "%.2f s"), fmtOpt(s.Values, MSoftirq, "%.2f s"))

	// 5. Small-packet UDP A→B.
	say("measuring UDP %d-byte payload pod A -> pod B, bitrate %s (%ss)", cfg.UDPSize, cfg.UDPBitrate, secs)
	if r, err = runClient("-u", "-l", strconv.Itoa(cfg.UDPSize), "-b", cfg.UDPBitrate); err != nil {
		return s, err
	}
	s.Values[MUDPPPS] = r.DeliveredPPS()
	s.Values[MUDPLoss] = r.LostPercent
	say("  %.0f packets/s delivered, %.1f%% lost", s.Values[MUDPPPS], s.Values[MUDPLoss])
	return s, checkGW()
}

func fmtOpt(m map[string]float64, k, format string) string {
	v, ok := m[k]
	if !ok {
		return "n/a"
	}
	return fmt.Sprintf(format, v)
}

func settingsOf(cfg Config) Settings {
	return Settings{
		Runs:         cfg.Runs,
		DurationS:    cfg.Duration.Seconds(),
		TunMTU:       cfg.TunMTU,
		WANMTU:       cfg.WANMTU,
		Streams:      cfg.Streams,
		UDPSize:      cfg.UDPSize,
		UDPBitrate:   cfg.UDPBitrate,
		PingInterval: cfg.PingInterval.String(),
		GatewaySched: cfg.GatewaySched.String(),
	}
}

// keepSched puts every thread of the gateways under p now and every
// 250 ms until the returned stop is called (sched.Keeper).
func keepSched(p sched.Policy, gw modes.Gateways, say func(string, ...any)) (stop func() error, err error) {
	var pids []int
	for _, g := range []*lab.Proc{gw.A, gw.B} {
		if g != nil {
			pids = append(pids, g.PID())
		}
	}
	if len(pids) == 0 {
		return func() error { return nil }, nil
	}
	k, err := sched.Keep(p, 250*time.Millisecond, pids...)
	if err != nil {
		return nil, fmt.Errorf("-gateway-sched %s: %w", p, err)
	}
	say("gateway threads under %s (pids %v)", p, pids)
	return func() error {
		if err := k.Stop(); err != nil {
			return fmt.Errorf("-gateway-sched %s: %w", p, err)
		}
		return nil
	}, nil
}

// schedCounts is, per gateway, how many of its threads run under p.
func schedCounts(p sched.Policy, gw modes.Gateways) []string {
	var out []string
	for _, g := range []*lab.Proc{gw.A, gw.B} {
		if g == nil {
			continue
		}
		under, total, err := p.Count(g.PID())
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", g.Name, err))
			continue
		}
		out = append(out, fmt.Sprintf("%s %d/%d %s", g.Name, under, total, p))
	}
	return out
}

// setLoaded records a probe run under load at keys: the p50 and p99 of
// its round trips as read, the same of its kernel-stamped ones, and the
// percentage of probes lost (left out when none was sent).
func setLoaded(values map[string]float64, keys [5]string, rtts, kernelRTTs []float64, sent, lost int) {
	values[keys[0]] = stats.Percentile(rtts, 50)
	values[keys[1]] = stats.Percentile(rtts, 99)
	values[keys[2]] = stats.Percentile(kernelRTTs, 50)
	values[keys[3]] = stats.Percentile(kernelRTTs, 99)
	if sent > 0 {
		values[keys[4]] = 100 * float64(lost) / float64(sent)
	}
}
