package flood

import (
	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/results"
)

// Report is the result of bhbench -flood, written as results.json.
type Report struct {
	Measurement string       `json:"measurement"` // "flood"
	Started     string       `json:"started"`
	Finished    string       `json:"finished"`
	Interrupted bool         `json:"interrupted,omitempty"`
	Host        results.Host `json:"host"`
	Settings    Settings     `json:"settings"`
	Phases      []Phase      `json:"phases"`
	Targets     []Target     `json:"targets"`
}

// Settings are the flags the results depend on.
type Settings struct {
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

// Phase is one TCP measurement, with or without a flood, and what
// gateway B did meanwhile. Counter deltas are over the window from just
// before the flood starts to half a second after it ends.
type Phase struct {
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
	// DIRECTION/REASON, every reason of Reasons (outside) included.
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

// Target is one criterion checked on one phase.
type Target struct {
	Phase string  `json:"phase"`
	Name  string  `json:"target"`
	Value float64 `json:"value"`
	Met   bool    `json:"met"`
}

// Evaluate computes the ratios to the first baseline and checks the
// targets on the flood phases.
func (r *Report) Evaluate() {
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
			r.Targets = append(r.Targets, Target{p.Name, TThroughput, p.Ratio, p.Ratio >= TargetThroughputRatio})
		}
		r.Targets = append(r.Targets, Target{p.Name, TRSS, p.RSSGrowthMiB, p.RSSGrowthMiB < TargetRSSGrowthMiB})
		if p.Kind == flooder.BadMAC {
			r.Targets = append(r.Targets, Target{p.Name, TDH, p.DHOps, p.DHOps == 0})
		}
		if p.Flood != nil {
			r.Targets = append(r.Targets, Target{p.Name, TFloodRate, p.Flood.PPS, p.Flood.PPS >= TargetFloodPPS})
		}
	}
}

// AllMet reports whether every target was checked and met.
func (r *Report) AllMet() bool {
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
func (r *Report) JSON() ([]byte, error) {
	return results.JSON(r)
}

// WriteFiles writes results.json and results.md to dir and returns their
// paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	j, err := r.JSON()
	if err != nil {
		return nil, err
	}
	return results.Write(dir, []results.File{{Name: "results.json", Data: j}, {Name: "results.md", Data: []byte(r.Markdown())}})
}

func (r *Report) phase(name string) *Phase {
	for i := range r.Phases {
		if r.Phases[i].Name == name && r.Phases[i].Error == "" {
			return &r.Phases[i]
		}
	}
	return nil
}
