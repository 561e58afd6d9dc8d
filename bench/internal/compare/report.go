package compare

import (
	"fmt"
	"math"
	"strings"

	"github.com/bridgehead/bridgehead/bench/internal/modes"
	"github.com/bridgehead/bridgehead/bench/internal/results"
	"github.com/bridgehead/bridgehead/bench/internal/stats"
)

// Report is the result of one benchmark invocation, written as
// results.json.
type Report struct {
	Started     string       `json:"started"`
	Finished    string       `json:"finished"`
	Interrupted bool         `json:"interrupted,omitempty"`
	Host        results.Host `json:"host"`
	Settings    Settings     `json:"settings"`
	// Variants in column order: kernel, bridgehead-CIPHER..., wireguard-go.
	Variants []string `json:"variants"`
	Samples  []Sample `json:"samples"`
	// Medians[variant][metric] over the runs that measured the metric.
	Medians map[string]map[string]float64 `json:"medians"`
	// OKRuns[variant] is the number of runs that completed.
	OKRuns map[string]int `json:"ok_runs"`
	// Metrics describes the keys of Medians and Samples[].Values.
	Metrics []MetricDef `json:"metrics"`
}

// Settings are the flags the results depend on.
type Settings struct {
	Runs         int     `json:"runs"`
	DurationS    float64 `json:"duration_s"`
	TunMTU       int     `json:"tunnel_mtu"`
	WANMTU       int     `json:"wan_mtu"`
	Streams      int     `json:"streams"`
	UDPSize      int     `json:"udp_payload_bytes"`
	UDPBitrate   string  `json:"udp_bitrate"`
	PingInterval string  `json:"ping_interval"`
	// GatewaySched is -gateway-sched ("fifo:10"), "" when the gateways ran
	// under the default policy.
	GatewaySched string `json:"gateway_sched,omitempty"`
}

// MetricDef describes one metric.
type MetricDef struct {
	Key          string `json:"key"`
	Label        string `json:"label"`
	Unit         string `json:"unit"`
	Decimals     int    `json:"-"`
	HigherBetter bool   `json:"higher_is_better"`
}

// Metrics lists the metrics in table order.
func Metrics(s Settings) []MetricDef {
	return []MetricDef{
		{MTCP1, "TCP 1 stream A→B", "Mbit/s", 0, true},
		{MTCPN, fmt.Sprintf("TCP %d streams A→B", s.Streams), "Mbit/s", 0, true},
		{MTCPRev, "TCP 1 stream B→A (reverse)", "Mbit/s", 0, true},
		{MRetransmits, "TCP 1 stream retransmits", "segments", 0, false},
		{MUDPPPS, fmt.Sprintf("UDP %d B delivered", s.UDPSize), "packets/s", 0, true},
		{MUDPLoss, fmt.Sprintf("UDP %d B loss", s.UDPSize), "%", 1, false},
		{MRTTIdle50, "ICMP RTT idle p50", "ms", 3, false},
		{MRTTIdle99, "ICMP RTT idle p99", "ms", 3, false},
		{MRTTLoad50, "ICMP RTT under load p50", "ms", 3, false},
		{MRTTLoad99, "ICMP RTT under load p99", "ms", 3, false},
		{MRTTLoadLoss, "ICMP echoes lost under load", "%", 1, false},
		{MRRLoad50, "UDP 100 Hz request/response under load p50", "ms", 3, false},
		{MRRLoad99, "UDP 100 Hz request/response under load p99", "ms", 3, false},
		{MRRLoadLoss, "UDP requests lost under load", "%", 1, false},
		{MRTTLoadK50, "ICMP RTT under load p50, to the kernel's receive stamp", "ms", 3, false},
		{MRTTLoadK99, "ICMP RTT under load p99, to the kernel's receive stamp", "ms", 3, false},
		{MRRLoadK50, "UDP request/response under load p50, to the kernel's receive stamp", "ms", 3, false},
		{MRRLoadK99, "UDP request/response under load p99, to the kernel's receive stamp", "ms", 3, false},
		{MCPUA, "CPU gateway A per GB", "s/GB", 2, false},
		{MCPUB, "CPU gateway B per GB", "s/GB", 2, false},
		{MSoftirq, "softirq, whole machine, per GB", "s/GB", 2, false},
		{MExpressN, fmt.Sprintf("express datagrams sent by gateway B, TCP %d streams", s.Streams), "datagrams", 0, false},
		{MStrays, "lane strays, both gateways, TCP tests", "datagrams", 0, false},
	}
}

// Summarize fills Medians, OKRuns and Metrics from Samples.
func (r *Report) Summarize() {
	r.Metrics = Metrics(r.Settings)
	r.Medians = map[string]map[string]float64{}
	r.OKRuns = map[string]int{}
	for _, v := range r.Variants {
		med := map[string]float64{}
		for _, m := range r.Metrics {
			var xs []float64
			for _, s := range r.Samples {
				if x, ok := s.Values[m.Key]; ok && s.Variant == v && !math.IsNaN(x) && !math.IsInf(x, 0) {
					xs = append(xs, x)
				}
			}
			if len(xs) > 0 {
				med[m.Key] = stats.Median(xs)
			}
		}
		r.Medians[v] = med
		for _, s := range r.Samples {
			if s.Variant == v && s.Error == "" {
				r.OKRuns[v]++
			}
		}
	}
}

// JSON is the report as indented JSON. NaN and infinite values, which JSON
// cannot hold, are left out of the samples.
func (r *Report) JSON() ([]byte, error) {
	c := *r
	c.Samples = nil
	for _, s := range r.Samples {
		vals := map[string]float64{}
		for k, x := range s.Values {
			if !math.IsNaN(x) && !math.IsInf(x, 0) {
				vals[k] = x
			}
		}
		s.Values = vals
		c.Samples = append(c.Samples, s)
	}
	return results.JSON(&c)
}

// WriteFiles writes results.json, results.md and results.svg to dir and
// returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	j, err := r.JSON()
	if err != nil {
		return nil, err
	}
	return results.Write(dir, []results.File{
		{Name: "results.json", Data: j},
		{Name: "results.md", Data: []byte(r.Markdown())},
		{Name: "results.svg", Data: []byte(r.SVG())},
	})
}

func (r *Report) value(variant, key string) (float64, bool) {
	v, ok := r.Medians[variant][key]
	return v, ok
}

func (r *Report) has(variant string) bool {
	for _, v := range r.Variants {
		if v == variant {
			return true
		}
	}
	return false
}

// Markdown is the results as Markdown: a table of medians and a table of
// ratios to kernel and to wireguard-go.
func (r *Report) Markdown() string {
	var b strings.Builder
	h, s := r.Host, r.Settings
	fmt.Fprintf(&b, "### bridgehead benchmark, %s\n\n", r.Started)
	b.WriteString(h.Line())
	fmt.Fprintf(&b, ".\nMedians of %d run(s) of %g s per measurement; tunnel MTU %d, WAN MTU %d, pods MTU 1500; "+
		"UDP payload %d B at bitrate %s; ping every %s.", s.Runs, s.DurationS, s.TunMTU, s.WANMTU, s.UDPSize, s.UDPBitrate, s.PingInterval)
	if s.GatewaySched != "" {
		fmt.Fprintf(&b, " Every thread of both gateways under scheduling policy %s (-gateway-sched; a control, not a setting to deploy).", s.GatewaySched)
	}
	if r.Interrupted {
		b.WriteString(" **Interrupted: partial results.**")
	}
	b.WriteString("\n\n")

	b.WriteString("| metric |")
	for _, v := range r.Variants {
		fmt.Fprintf(&b, " %s |", v)
	}
	b.WriteString("\n|---|")
	for range r.Variants {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, m := range r.Metrics {
		fmt.Fprintf(&b, "| %s (%s) |", m.Label, m.Unit)
		for _, v := range r.Variants {
			if x, ok := r.value(v, m.Key); ok {
				fmt.Fprintf(&b, " %s |", results.FormatValue(x, m.Decimals))
			} else {
				b.WriteString(" n/a |")
			}
		}
		b.WriteString("\n")
	}
	b.WriteString("| runs completed |")
	for _, v := range r.Variants {
		fmt.Fprintf(&b, " %d/%d |", r.OKRuns[v], s.Runs)
	}
	b.WriteString("\n")

	// Ratios: every other variant to kernel, every other variant to
	// wireguard-go.
	type col struct{ num, den string }
	var cols []col
	for _, base := range []string{modes.Kernel, modes.WireguardGo} {
		if !r.has(base) {
			continue
		}
		for _, v := range r.Variants {
			if v != base && !(base == modes.WireguardGo && v == modes.Kernel) {
				cols = append(cols, col{v, base})
			}
		}
	}
	if len(cols) > 0 {
		b.WriteString("\nRatios of the medians (for Mbit/s and packets/s higher is better; for ms, loss and s/GB lower is better):\n\n| metric |")
		for _, c := range cols {
			fmt.Fprintf(&b, " %s ÷ %s |", c.num, c.den)
		}
		b.WriteString("\n|---|")
		for range cols {
			b.WriteString("---:|")
		}
		b.WriteString("\n")
		for _, m := range r.Metrics {
			if m.Key == MRetransmits || m.Key == MUDPLoss || m.Key == MRTTLoadLoss || m.Key == MRRLoadLoss || m.Key == MExpressN || m.Key == MStrays {
				continue
			}
			fmt.Fprintf(&b, "| %s |", m.Label)
			for _, c := range cols {
				x, ok1 := r.value(c.num, m.Key)
				y, ok2 := r.value(c.den, m.Key)
				if ok1 && ok2 && y != 0 {
					fmt.Fprintf(&b, " %.2f× |", x/y)
				} else {
					b.WriteString(" n/a |")
				}
			}
			b.WriteString("\n")
		}
	}
	var fails []string
	for _, s := range r.Samples {
		if s.Error != "" {
			first, _, _ := strings.Cut(s.Error, "\n")
			fails = append(fails, fmt.Sprintf("- %s run %d: %s", s.Variant, s.Run, first))
		}
	}
	if len(fails) > 0 {
		b.WriteString("\nFailed runs:\n\n" + strings.Join(fails, "\n") + "\n")
	}
	return b.String()
}

// palette colours the variants in column order.
