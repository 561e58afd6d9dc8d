package compare

import (
	"fmt"
	"html"
	"math"
	"strings"
)

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
