package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/bridgehead/bridgehead/internal/bench/flooder"
	"github.com/bridgehead/bridgehead/internal/bench/lab"
	"github.com/bridgehead/bridgehead/internal/bench/modes"
	"github.com/bridgehead/bridgehead/internal/bench/procfs"
	"github.com/bridgehead/bridgehead/internal/bench/promtext"
)

// FloodConfig is one flood measurement (bhbench -flood): while a TCP
// stream runs pod A → pod B through bridgehead, a flooder in a fifth
// namespace sends gateway B's UDP port garbage, then handshake
// initiations with bad MACs.
type FloodConfig struct {
	Tools modes.Tools
	// Cipher is bridgehead's cipher.
	Cipher string
	// Duration of each TCP measurement; each flood starts FloodLead
	// before it and ends FloodLead after it.
	Duration time.Duration
	// PPS is the flood rate the flooder aims at; Batch its datagrams per
	// sendmmsg call.
	PPS   float64
	Batch int
	// TunMTU, WANMTU as in Config.
	TunMTU, WANMTU int
	// Worker is the bhbench binary, run as `Worker flood-worker ...` in
	// the flood namespace.
	Worker string
	// Control adds a phase flooding a closed port of gateway B (kernel
	// work only, bridgehead not involved), to tell the cost of the flood
	// to the machine from the cost of bridgehead handling it.
	Control bool
	// OutDir receives results.{json,md} and, under work/flood, the configs
	// and logs.
	OutDir string
	// Prefix names the namespaces (PREFIX-a-node, ..., PREFIX-flood).
	Prefix string
	// Progress receives what the harness is doing; Verbose adds every
	// command.
	Progress io.Writer
	Verbose  bool
}

// FloodLead is how long a flood runs before the TCP measurement starts
// (so that the stream meets the flood at full rate) and after it ends.
const FloodLead = time.Second

// Phases of a flood measurement, in order.
const (
	PhaseBaseline      = "baseline"
	PhaseControl       = "control_closed_port"
	PhaseGarbage       = "garbage"
	PhaseBadMAC        = "badmac"
	PhaseBaselineAfter = "baseline_after"
)

// floodPhaseDef is one phase: its flood kind ("" for none) and the port of
// gateway B it floods.
type floodPhaseDef struct {
	name, kind, label string
	port              int
}

// floodPhases are the phases in order. The second baseline shows how
// much the unflooded stream drifts by itself: a ratio near 0.9 means
// little when the baselines differ as much. The control phase (with
// control) sends the garbage flood to a port nobody listens on.
func floodPhases(control bool) []floodPhaseDef {
	ps := []floodPhaseDef{{PhaseBaseline, "", "baseline", 0}}
	if control {
		ps = append(ps, floodPhaseDef{PhaseControl, flooder.Garbage, "control: garbage to a closed port", ControlPort})
	}
	return append(ps,
		floodPhaseDef{PhaseGarbage, flooder.Garbage, "garbage flood", 51820},
		floodPhaseDef{PhaseBadMAC, flooder.BadMAC, "bad-MAC initiation flood", 51820},
		floodPhaseDef{PhaseBaselineAfter, "", "baseline after", 0},
	)
}

// ControlPort is the closed port of gateway B the control phase floods.
const ControlPort = 51821

// FloodReasons are the outside drop reasons a flood can cause, shown one
// row each.
var FloodReasons = []string{"runt", "unknown_type", "unknown_index", "bad_tag", "bad_size", "bad_mac", "handshake_busy", "cookie_required", "rate_limited"}

// Targets of the flood measurement (the acceptance criteria).
const (
	TargetThroughputRatio = 0.90
	TargetRSSGrowthMiB    = 50
	TargetFloodPPS        = 100000
)

// FloodReport is the result of bhbench -flood, written as results.json.
type FloodReport struct {
	Measurement string        `json:"measurement"` // "flood"
	Started     string        `json:"started"`
	Finished    string        `json:"finished"`
	Interrupted bool          `json:"interrupted,omitempty"`
	Host        Host          `json:"host"`
	Settings    FloodSettings `json:"settings"`
	Phases      []FloodPhase  `json:"phases"`
	Targets     []FloodTarget `json:"targets"`
}

// FloodSettings are the flags the results depend on.
type FloodSettings struct {
	Variant   string  `json:"variant"`
	DurationS float64 `json:"duration_s"`
	LeadS     float64 `json:"flood_lead_s"`
	TargetPPS float64 `json:"flood_target_pps"`
	Batch     int     `json:"flood_batch"`
	FloodFrom string  `json:"flood_from"`
	FloodTo   string  `json:"flood_to"`
	Control   bool    `json:"control_phase,omitempty"`
	TunMTU    int     `json:"tunnel_mtu"`
	WANMTU    int     `json:"wan_mtu"`
}

// FloodPhase is one TCP measurement, with or without a flood, and what
// gateway B did meanwhile. Counter deltas are over the window from just
// before the flood starts to half a second after it ends.
type FloodPhase struct {
	Name string `json:"name"`
	// Kind is the flood kind, "" for a baseline.
	Kind        string  `json:"flood_kind,omitempty"`
	TCPMbps     float64 `json:"tcp1_mbps"`
	Ratio       float64 `json:"ratio_to_baseline,omitempty"`
	Retransmits float64 `json:"tcp1_retransmits"`
	// Flood is what the flooder reports (nil for a baseline).
	Flood *flooder.Result `json:"flood,omitempty"`
	// WindowS is the length of the counter window.
	WindowS float64 `json:"window_s"`
	// Gateway B's resident memory (VmRSS, KiB) before, after, and the
	// highest of the samples taken every 100 ms in between.
	RSSBeforeKiB int64   `json:"rss_before_kib"`
	RSSAfterKiB  int64   `json:"rss_after_kib"`
	RSSPeakKiB   int64   `json:"rss_peak_kib"`
	RSSGrowthMiB float64 `json:"rss_growth_mib"` // max(peak, after) - before
	// GatewayCPUPct and GatewayACPUPct are gateway B's and A's CPU time
	// over the window, in percent of one core; MachineBusyPct is the
	// non-idle time of all CPUs (/proc/stat), in percent of all of them.
	GatewayCPUPct  float64 `json:"gw_b_cpu_pct"`
	GatewayACPUPct float64 `json:"gw_a_cpu_pct"`
	MachineBusyPct float64 `json:"machine_busy_pct"`
	// Drops are the deltas of bridgehead_dropped_packets_total, keyed
	// DIRECTION/REASON, every reason of FloodReasons (outside) included.
	Drops map[string]float64 `json:"drops"`
	// DHOps, CookieReplies: deltas of
	// bridgehead_handshake_dh_operations_total and
	// bridgehead_handshake_cookie_replies_total; Handshakes the deltas
	// of bridgehead_handshakes_total by result (the legitimate ones).
	DHOps         float64            `json:"dh_operations"`
	CookieReplies float64            `json:"cookie_replies"`
	Handshakes    map[string]float64 `json:"handshakes,omitempty"`
	// Kernel counters: UDP of gateway B's namespace (/proc/PID/net/snmp:
	// InDatagrams, RcvbufErrors, InErrors, NoPorts) and the machine's softnet
	// backlog drops (/proc/net/softnet_stat).
	UDP          map[string]float64 `json:"gw_b_udp"`
	SoftnetDrops float64            `json:"softnet_drops"`
	Error        string             `json:"error,omitempty"`
}

// FloodTarget is one criterion checked on one phase.
type FloodTarget struct {
	Phase string  `json:"phase"`
	Name  string  `json:"target"`
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

// Target names.
const (
	TThroughput = "throughput_ratio_ge_0.90"
	TRSS        = "rss_growth_lt_50_mib"
	TDH         = "dh_operations_eq_0"
	TFloodRate  = "flood_pps_ge_100000"
)

// RunFlood builds the topology with a flood namespace, starts bridgehead,
// and measures the phases of floodPhases in order. Every namespace and
// process it starts is gone when it returns.
func RunFlood(ctx context.Context, cfg FloodConfig) (rep *FloodReport, err error) {
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.Batch < 1 {
		cfg.Batch = 64
	}
	v := modes.Variant{Mode: modes.Bridgehead, Cipher: cfg.Cipher}
	rep = &FloodReport{
		Measurement: "flood",
		Started:     time.Now().UTC().Format(time.RFC3339),
		Host:        hostInfo(cfg.Tools),
		Settings: FloodSettings{
			Variant: v.String(), DurationS: cfg.Duration.Seconds(), LeadS: FloodLead.Seconds(),
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
	if err := serveAndConnect(ctx, t, cfg.Tools.Iperf3); err != nil {
		return rep, err
	}
	// Warm-up, not reported: the first stream finds the tunnel's path
	// MTU (the pods have 1500) and the gateways grow their buffers; the
	// baseline should not carry either.
	say("warming up: TCP 1 stream pod A -> pod B (2s), not reported")
	if _, err := runIperf(ctx, t, []string{cfg.Tools.Iperf3, "-c", lab.PodB.String(), "-B", lab.PodA.String(), "-p", "5201", "-t", "2", "-J"}, 2*time.Second); err != nil {
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
func floodPhase(ctx context.Context, cfg FloodConfig, proc procfs.FS, t *lab.Topology, gw modes.Gateways, def floodPhaseDef, say func(string, ...any)) (FloodPhase, error) {
	kind := def.kind
	ph := FloodPhase{Name: def.name, Kind: kind}
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
			"-batch", strconv.Itoa(cfg.Batch), "-duration", (d + 2*FloodLead).String())
		if err != nil {
			return ph, err
		}
		select {
		case <-ctx.Done():
			return ph, ctx.Err()
		case <-time.After(FloodLead):
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
	r, ierr := runIperf(ctx, t, []string{cfg.Tools.Iperf3, "-c", lab.PodB.String(), "-B", lab.PodA.String(), "-p", "5201", "-t", secs, "-J"}, d)
	if worker != nil {
		if err := lab.WaitFor(ctx, d+2*FloodLead+30*time.Second, func() (bool, error) {
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

// gwSnapshot is gateway B's counters at one moment.
type gwSnapshot struct {
	at          time.Time
	metrics     []promtext.Sample
	rssKiB      int64
	cpu, cpuA   float64
	busy, total float64
	udp         map[string]float64
	softnet     float64
}

func snapshotGateway(ctx context.Context, proc procfs.FS, t *lab.Topology, gw modes.Gateways) (gwSnapshot, error) {
	s := gwSnapshot{at: time.Now()}
	gwB := gw.B
	var err error
	if s.cpuA, err = proc.ProcessCPU(gw.A.PID()); err != nil {
		return s, err
	}
	c, err := proc.CPU()
	if err != nil {
		return s, err
	}
	s.busy, s.total = c.Busy, c.Total
	if s.metrics, err = scrapeMetrics(ctx, t.NS(lab.BGW), "http://127.0.0.1:9641/metrics"); err != nil {
		return s, err
	}
	pid := gwB.PID()
	if s.rssKiB, _, err = proc.ProcessMemory(pid); err != nil {
		return s, err
	}
	if s.cpu, err = proc.ProcessCPU(pid); err != nil {
		return s, err
	}
	// /proc/PID/net is the network namespace of PID: gateway B's.
	u, err := proc.ProcessUDP(pid)
	if err != nil {
		return s, err
	}
	s.udp = map[string]float64{"InDatagrams": u.InDatagrams, "RcvbufErrors": u.RcvbufErrors, "InErrors": u.InErrors, "NoPorts": u.NoPorts}
	if s.softnet, err = proc.SoftnetDrops(); err != nil {
		return s, err
	}
	return s, nil
}

// fillDeltas sets ph's counters from two snapshots.
func fillDeltas(ph *FloodPhase, a, b gwSnapshot, peakKiB int64) {
	ph.WindowS = b.at.Sub(a.at).Seconds()
	ph.RSSBeforeKiB, ph.RSSAfterKiB = a.rssKiB, b.rssKiB
	ph.RSSPeakKiB = max(peakKiB, a.rssKiB, b.rssKiB)
	ph.RSSGrowthMiB = kib2mib(max(ph.RSSPeakKiB, b.rssKiB) - a.rssKiB)
	if ph.WindowS > 0 {
		ph.GatewayCPUPct = 100 * (b.cpu - a.cpu) / ph.WindowS
		ph.GatewayACPUPct = 100 * (b.cpuA - a.cpuA) / ph.WindowS
	}
	if b.total > a.total {
		ph.MachineBusyPct = 100 * (b.busy - a.busy) / (b.total - a.total)
	}
	ph.Drops = map[string]float64{}
	for _, r := range FloodReasons {
		ph.Drops["outside/"+r] = 0
	}
	for _, s := range b.metrics {
		if s.Name != "bridgehead_dropped_packets_total" {
			continue
		}
		k := s.Labels["direction"] + "/" + s.Labels["reason"]
		if d := s.Value - promtext.Value(a.metrics, s.Name, s.Labels); d != 0 || strings.HasPrefix(k, "outside/") && slices.Contains(FloodReasons, s.Labels["reason"]) {
			ph.Drops[k] = d
		}
	}
	delta := func(name string) float64 {
		return promtext.Value(b.metrics, name, nil) - promtext.Value(a.metrics, name, nil)
	}
	ph.DHOps = delta("bridgehead_handshake_dh_operations_total")
	ph.CookieReplies = delta("bridgehead_handshake_cookie_replies_total")
	ph.Handshakes = map[string]float64{}
	for _, s := range b.metrics {
		if s.Name == "bridgehead_handshakes_total" {
			if d := s.Value - promtext.Value(a.metrics, s.Name, s.Labels); d != 0 {
				ph.Handshakes[s.Labels["result"]] = d
			}
		}
	}
	ph.UDP = map[string]float64{}
	for _, k := range []string{"InDatagrams", "RcvbufErrors", "InErrors", "NoPorts"} {
		ph.UDP[k] = b.udp[k] - a.udp[k]
	}
	ph.SoftnetDrops = b.softnet - a.softnet
}

// scrapeMetrics fetches a metrics page from inside namespace ns (the
// gateway's endpoint listens on its namespace's loopback).
func scrapeMetrics(ctx context.Context, ns, url string) ([]promtext.Sample, error) {
	tr := &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := lab.InNetns(ns, func() error {
				var err error
				c, err = (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
	defer tr.CloseIdleConnections()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return nil, fmt.Errorf("metrics of %s: %w", ns, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics of %s: %s", ns, resp.Status)
	}
	return promtext.Parse(b)
}

// Evaluate computes the ratios to the first baseline and checks the
// targets on the flood phases.
func (r *FloodReport) Evaluate() {
	var base float64
	for i := range r.Phases {
		p := &r.Phases[i]
		if p.Name == PhaseBaseline && p.Error == "" {
			base = p.TCPMbps
		}
	}
	r.Targets = nil
	for i := range r.Phases {
		p := &r.Phases[i]
		if p.Error != "" {
			continue
		}
		if base > 0 && p.Name != PhaseBaseline {
			p.Ratio = p.TCPMbps / base
		}
		if p.Kind == "" || p.Name == PhaseControl {
			continue
		}
		if base > 0 {
			r.Targets = append(r.Targets, FloodTarget{p.Name, TThroughput, p.Ratio, p.Ratio >= TargetThroughputRatio})
		}
		r.Targets = append(r.Targets, FloodTarget{p.Name, TRSS, p.RSSGrowthMiB, p.RSSGrowthMiB < TargetRSSGrowthMiB})
		if p.Kind == flooder.BadMAC {
			r.Targets = append(r.Targets, FloodTarget{p.Name, TDH, p.DHOps, p.DHOps == 0})
		}
		if p.Flood != nil {
			r.Targets = append(r.Targets, FloodTarget{p.Name, TFloodRate, p.Flood.PPS, p.Flood.PPS >= TargetFloodPPS})
		}
	}
}

// AllMet reports whether every target was checked and met.
func (r *FloodReport) AllMet() bool {
	if len(r.Targets) == 0 {
		return false
	}
	for _, t := range r.Targets {
		if !t.Met {
			return false
		}
	}
	return true
}

// JSON is the report as indented JSON.
func (r *FloodReport) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFiles writes results.json and results.md to dir and returns their
// paths.
func (r *FloodReport) WriteFiles(dir string) ([]string, error) {
	j, err := r.JSON()
	if err != nil {
		return nil, err
	}
	return writeResults(dir, []resultFile{{"results.json", j}, {"results.md", []byte(r.Markdown())}})
}

func (r *FloodReport) phase(name string) *FloodPhase {
	for i := range r.Phases {
		if r.Phases[i].Name == name && r.Phases[i].Error == "" {
			return &r.Phases[i]
		}
	}
	return nil
}

// Markdown is the flood results: one column per phase, then the targets.
func (r *FloodReport) Markdown() string {
	var b strings.Builder
	h, s := r.Host, r.Settings
	fmt.Fprintf(&b, "### bridgehead flood benchmark, %s\n\n", r.Started)
	fmt.Fprintf(&b, "Linux %s, %d CPUs", h.Kernel, h.CPUs)
	if h.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", h.CPUModel)
	}
	b.WriteString("; ")
	var tools []string
	for _, t := range []string{h.Bridgehead, h.Iperf3} {
		if t != "" {
			tools = append(tools, t)
		}
	}
	b.WriteString(strings.Join(tools, "; "))
	fmt.Fprintf(&b, ".\n%s, one TCP stream pod A → pod B for %g s per phase; each flood aims at %s packets/s "+
		"from %s to gateway B's %s (sendmmsg, %d per call), starting %g s before the stream and ending %g s after it; "+
		"tunnel MTU %d, WAN MTU %d. Counters are deltas over each phase's window.",
		s.Variant, s.DurationS, formatValue(s.TargetPPS, 0), s.FloodFrom, s.FloodTo, s.Batch, s.LeadS, s.LeadS, s.TunMTU, s.WANMTU)
	if r.Interrupted {
		b.WriteString(" **Interrupted: partial results.**")
	}
	b.WriteString("\n\n| metric |")
	phases := floodPhases(s.Control)
	for _, p := range phases {
		fmt.Fprintf(&b, " %s |", p.label)
	}
	b.WriteString("\n|---|")
	for range phases {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	type row struct {
		label    string
		decimals int
		get      func(p *FloodPhase) (float64, bool)
	}
	flood := func(f func(*flooder.Result) float64) func(p *FloodPhase) (float64, bool) {
		return func(p *FloodPhase) (float64, bool) {
			if p.Flood == nil {
				return 0, false
			}
			return f(p.Flood), true
		}
	}
	always := func(f func(p *FloodPhase) float64) func(p *FloodPhase) (float64, bool) {
		return func(p *FloodPhase) (float64, bool) { return f(p), true }
	}
	rows := []row{
		{"TCP 1 stream A→B (Mbit/s)", 0, always(func(p *FloodPhase) float64 { return p.TCPMbps })},
		{"ratio to baseline", 2, func(p *FloodPhase) (float64, bool) { return p.Ratio, p.Ratio != 0 }},
		{"TCP retransmits (segments)", 0, always(func(p *FloodPhase) float64 { return p.Retransmits })},
		{"flood achieved, counted by the flooder (packets/s)", 0, flood(func(f *flooder.Result) float64 { return f.PPS })},
		{"flood datagrams sent", 0, flood(func(f *flooder.Result) float64 { return float64(f.Sent) })},
		{"flood send errors", 0, flood(func(f *flooder.Result) float64 { return float64(f.SendErrors) })},
		{"flood datagrams skipped, flooder not running when due", 0, flood(func(f *flooder.Result) float64 { return float64(f.Behind) })},
		{"flooder CPU (% of one core)", 0, flood(func(f *flooder.Result) float64 { return f.CPUPct() })},
		{"gateway B CPU (% of one core)", 0, always(func(p *FloodPhase) float64 { return p.GatewayCPUPct })},
		{"gateway A CPU (% of one core)", 0, always(func(p *FloodPhase) float64 { return p.GatewayACPUPct })},
		{fmt.Sprintf("machine CPU busy (%% of %d CPUs)", h.CPUs), 0, always(func(p *FloodPhase) float64 { return p.MachineBusyPct })},
		{"gateway B VmRSS before (MiB)", 1, always(func(p *FloodPhase) float64 { return kib2mib(p.RSSBeforeKiB) })},
		{"gateway B VmRSS after (MiB)", 1, always(func(p *FloodPhase) float64 { return kib2mib(p.RSSAfterKiB) })},
		{"gateway B VmRSS peak (MiB)", 1, always(func(p *FloodPhase) float64 { return kib2mib(p.RSSPeakKiB) })},
		{"gateway B VmRSS growth (MiB)", 1, always(func(p *FloodPhase) float64 { return p.RSSGrowthMiB })},
		{"gateway B UDP datagrams received (kernel)", 0, always(func(p *FloodPhase) float64 { return p.UDP["InDatagrams"] })},
		{"gateway B UDP receive buffer overflows (kernel)", 0, always(func(p *FloodPhase) float64 { return p.UDP["RcvbufErrors"] })},
		{"gateway B UDP datagrams to closed ports (kernel)", 0, always(func(p *FloodPhase) float64 { return p.UDP["NoPorts"] })},
		{"softnet backlog drops, whole machine", 0, always(func(p *FloodPhase) float64 { return p.SoftnetDrops })},
	}
	for _, reason := range FloodReasons {
		rows = append(rows, row{"dropped: " + reason, 0, always(func(p *FloodPhase) float64 { return p.Drops["outside/"+reason] })})
	}
	rows = append(rows,
		row{"dropped: other reasons, both directions", 0, always(func(p *FloodPhase) float64 {
			var n float64
			for k, v := range p.Drops {
				if r, ok := strings.CutPrefix(k, "outside/"); !ok || !slices.Contains(FloodReasons, r) {
					n += v
				}
			}
			return n
		})},
		row{"DH operations", 0, always(func(p *FloodPhase) float64 { return p.DHOps })},
		row{"cookie replies sent", 0, always(func(p *FloodPhase) float64 { return p.CookieReplies })},
		row{"legitimate handshake events", 0, always(func(p *FloodPhase) float64 {
			var n float64
			for _, v := range p.Handshakes {
				n += v
			}
			return n
		})},
	)
	for _, rw := range rows {
		fmt.Fprintf(&b, "| %s |", rw.label)
		for _, fp := range phases {
			p := r.phase(fp.name)
			if p == nil {
				b.WriteString(" n/a |")
				continue
			}
			if x, ok := rw.get(p); ok {
				fmt.Fprintf(&b, " %s |", formatValue(x, rw.decimals))
			} else {
				b.WriteString(" – |")
			}
		}
		b.WriteString("\n")
	}

	b.WriteString("\nTargets:\n\n| target | garbage flood | bad-MAC initiation flood |\n|---|---|---|\n")
	for _, tg := range []struct{ key, label, format string }{
		{TThroughput, "TCP throughput ≥ 90 % of baseline", "%.2f×"},
		{TRSS, "gateway B VmRSS growth < 50 MiB", "%.1f MiB"},
		{TDH, "zero DH operations for bad-MAC initiations", "%.0f"},
		{TFloodRate, "flood rate achieved ≥ 100,000 packets/s", ""},
	} {
		fmt.Fprintf(&b, "| %s |", tg.label)
		for _, ph := range []string{PhaseGarbage, PhaseBadMAC} {
			i := slices.IndexFunc(r.Targets, func(t FloodTarget) bool { return t.Phase == ph && t.Name == tg.key })
			if i < 0 {
				b.WriteString(" – |")
				continue
			}
			t := r.Targets[i]
			v := formatValue(t.Value, 0)
			if tg.format != "" {
				v = fmt.Sprintf(tg.format, t.Value)
			}
			if t.Met {
				fmt.Fprintf(&b, " met (%s) |", v)
			} else {
				fmt.Fprintf(&b, " **not met** (%s) |", v)
			}
		}
		b.WriteString("\n")
	}
	var fails []string
	for _, p := range r.Phases {
		if p.Error != "" {
			first, _, _ := strings.Cut(p.Error, "\n")
			fails = append(fails, fmt.Sprintf("- %s: %s", p.Name, first))
		}
	}
	if len(fails) > 0 {
		b.WriteString("\nFailed phases:\n\n" + strings.Join(fails, "\n") + "\n")
	}
	return b.String()
}
