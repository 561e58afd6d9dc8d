package bench

import (
	"encoding/json"
	"fmt"
	"html"
	"math"
	"os"
	"path/filepath"
	"strings"

	"github.com/bridgehead/bridgehead/internal/bench/modes"
	"github.com/bridgehead/bridgehead/internal/bench/stats"
)

// Report is the result of one benchmark invocation, written as
// results.json.
type Report struct {
	Started     string   `json:"started"`
	Finished    string   `json:"finished"`
	Interrupted bool     `json:"interrupted,omitempty"`
	Host        Host     `json:"host"`
	Settings    Settings `json:"settings"`
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

// Host describes the machine and the tools.
type Host struct {
	Kernel      string `json:"kernel"`
	CPUs        int    `json:"cpus"`
	CPUModel    string `json:"cpu_model,omitempty"`
	Bridgehead  string `json:"bridgehead,omitempty"`
	Iperf3      string `json:"iperf3,omitempty"`
	WireguardGo string `json:"wireguard_go,omitempty"`
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
		{MCPUA, "CPU gateway A per GB", "s/GB", 2, false},
		{MCPUB, "CPU gateway B per GB", "s/GB", 2, false},
		{MSoftirq, "softirq, whole machine, per GB", "s/GB", 2, false},
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
	b, err := json.MarshalIndent(&c, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// WriteFiles writes results.json, results.md and results.svg to dir and
// returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	j, err := r.JSON()
	if err != nil {
		return nil, err
	}
	return writeResults(dir, []resultFile{
		{"results.json", j},
		{"results.md", []byte(r.Markdown())},
		{"results.svg", []byte(r.SVG())},
	})
}

// resultFile is one output file of a run.
type resultFile struct {
	name string
	b    []byte
}

// writeResults writes files into dir, in order, and returns the paths
// written (up to the first error).
func writeResults(dir string, files []resultFile) ([]string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, f.name)
		if err := os.WriteFile(p, f.b, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

func (r *Report) value(variant, key string) (float64, bool) {
	v, ok := r.Medians[variant][key]
	return v, ok
}

func formatValue(x float64, decimals int) string {
	if math.Abs(x) >= 1000 && decimals == 0 {
		// Thousands separators for packet rates and the like.
		s := fmt.Sprintf("%.0f", x)
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 && s[i-1] != '-' {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		return b.String()
	}
	return fmt.Sprintf("%.*f", decimals, x)
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
	fmt.Fprintf(&b, "Linux %s, %d CPUs", h.Kernel, h.CPUs)
	if h.CPUModel != "" {
		fmt.Fprintf(&b, " (%s)", h.CPUModel)
	}
	b.WriteString("; ")
	var tools []string
	for _, t := range []string{h.Bridgehead, h.WireguardGo, h.Iperf3} {
		if t != "" {
			tools = append(tools, t)
		}
	}
	b.WriteString(strings.Join(tools, "; "))
	fmt.Fprintf(&b, ".\nMedians of %d run(s) of %g s per measurement; tunnel MTU %d, WAN MTU %d, pods MTU 1500; "+
		"UDP payload %d B at bitrate %s; ping every %s.", s.Runs, s.DurationS, s.TunMTU, s.WANMTU, s.UDPSize, s.UDPBitrate, s.PingInterval)
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
				fmt.Fprintf(&b, " %s |", formatValue(x, m.Decimals))
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
			if m.Key == MRetransmits || m.Key == MUDPLoss || m.Key == MRTTLoadLoss {
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
var palette = []string{"#7f7f7f", "#1f77b4", "#2ca02c", "#d62728", "#9467bd", "#ff7f0e", "#8c564b"}

type panel struct {
	title   string
	metrics []string
	labels  []string
	scale   float64 // values are divided by scale
	unit    string
}

// SVG is a grouped bar chart of the medians, one panel per kind of
// number, written by hand (no dependencies).
func (r *Report) SVG() string {
	panels := []panel{
		{"TCP throughput", []string{MTCP1, MTCPN, MTCPRev}, []string{"1 stream A→B", fmt.Sprintf("%d streams A→B", r.Settings.Streams), "1 stream B→A"}, 1000, "Gbit/s"},
		{fmt.Sprintf("UDP %d-byte payload delivered", r.Settings.UDPSize), []string{MUDPPPS}, []string{"delivered"}, 1000, "kpackets/s"},
		{"ICMP round-trip time", []string{MRTTIdle50, MRTTIdle99, MRTTLoad50, MRTTLoad99}, []string{"idle p50", "idle p99", "load p50", "load p99"}, 1, "ms"},
		{"CPU per GB carried (TCP tests)", []string{MCPUA, MCPUB, MSoftirq}, []string{"gateway A", "gateway B", "softirq (machine)"}, 1, "s/GB"},
	}
	const (
		width   = 860
		left    = 70
		right   = 20
		top     = 60
		panelH  = 230
		plotH   = 160
		legendY = 30
	)
	height := top + panelH*len(panels) + 10
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n", width, height, width, height)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	fmt.Fprintf(&b, `<text x="%d" y="20" font-size="15" font-weight="bold">%s</text>`+"\n", left, esc(fmt.Sprintf("bridgehead benchmark: medians of %d run(s), %g s each", r.Settings.Runs, r.Settings.DurationS)))
	// Legend.
	x := left
	for i, v := range r.Variants {
		fmt.Fprintf(&b, `<rect x="%d" y="%d" width="12" height="12" fill="%s"/><text x="%d" y="%d">%s</text>`+"\n", x, legendY, palette[i%len(palette)], x+16, legendY+10, esc(v))
		x += 16 + 8*len(v) + 24
	}
	nv := max(1, len(r.Variants))
	for pi, p := range panels {
		y0 := top + pi*panelH
		base := y0 + 30 + plotH
		// Scale: a round number at or above the largest value.
		maxV := 0.0
		for _, v := range r.Variants {
			for _, k := range p.metrics {
				if x, ok := r.value(v, k); ok {
					maxV = math.Max(maxV, x/p.scale)
				}
			}
		}
		top := niceCeil(maxV)
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="13" font-weight="bold">%s (%s)</text>`+"\n", left, y0+18, esc(p.title), esc(p.unit))
		for i := 0; i <= 4; i++ {
			yy := float64(base) - float64(plotH)*float64(i)/4
			fmt.Fprintf(&b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", left, yy, width-right, yy)
			fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n", left-6, yy+4, trimFloat(top*float64(i)/4))
		}
		groupW := float64(width-left-right) / float64(len(p.metrics))
		barW := math.Min(60, groupW*0.8/float64(nv))
		for gi, k := range p.metrics {
			gx := float64(left) + groupW*float64(gi) + (groupW-barW*float64(nv))/2
			for vi, v := range r.Variants {
				bx := gx + barW*float64(vi)
				val, ok := r.value(v, k)
				if !ok {
					fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle" fill="#999" font-size="10">n/a</text>`+"\n", bx+barW/2, base-4)
					continue
				}
				h := 0.0
				if top > 0 {
					h = val / p.scale / top * plotH
				}
				fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s</title></rect>`+"\n",
					bx, float64(base)-h, barW-2, h, palette[vi%len(palette)], esc(v), esc(p.labels[gi]), trimFloat(val/p.scale))
				fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n", bx+barW/2-1, float64(base)-h-3, trimFloat(val/p.scale))
			}
			fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", float64(left)+groupW*(float64(gi)+0.5), base+16, esc(p.labels[gi]))
		}
		fmt.Fprintf(&b, `<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="#333"/>`+"\n", left, base, width-right, base)
	}
	b.WriteString("</svg>\n")
	return b.String()
}

// niceCeil is the smallest of 1, 2, 2.5, 5 times a power of ten at or
// above x (1 for x <= 0).
func niceCeil(x float64) float64 {
	if x <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= x*(1-1e-12) {
			return m * p
		}
	}
	return 10 * p
}

// trimFloat formats with three significant decimals at most.
func trimFloat(x float64) string {
	var s string
	switch ax := math.Abs(x); {
	case ax >= 100:
		s = fmt.Sprintf("%.0f", x)
	case ax >= 10:
		s = fmt.Sprintf("%.1f", x)
	case ax >= 1:
		s = fmt.Sprintf("%.2f", x)
	default:
		s = fmt.Sprintf("%.3f", x)
	}
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}

func esc(s string) string { return html.EscapeString(s) }
