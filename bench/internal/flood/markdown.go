package flood

import (
	"fmt"
	"slices"
	"strings"

	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/results"
)

// Markdown is the flood results: one column per phase, then the targets.
func (r *Report) Markdown() string {
	var b strings.Builder
	h, s := r.Host, r.Settings
	fmt.Fprintf(&b, "### bridgehead flood benchmark, %s\n\n", r.Started)
	b.WriteString(h.Line())
	fmt.Fprintf(&b, ".\n%s, one TCP stream pod A → pod B for %g s per phase; each flood aims at %s packets/s "+
		"from %s to gateway B's %s (sendmmsg, %d per call), starting %g s before the stream and ending %g s after it; "+
		"tunnel MTU %d, WAN MTU %d. Counters are deltas over each phase's window.",
		s.Variant, s.DurationS, results.FormatValue(s.TargetPPS, 0), s.FloodFrom, s.FloodTo, s.Batch, s.LeadS, s.LeadS, s.TunMTU, s.WANMTU)
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
		get      func(p *Phase) (float64, bool)
	}
	flood := func(f func(*flooder.Result) float64) func(p *Phase) (float64, bool) {
		return func(p *Phase) (float64, bool) {
			if p.Flood == nil {
				return 0, false
			}
			return f(p.Flood), true
		}
	}
	always := func(f func(p *Phase) float64) func(p *Phase) (float64, bool) {
		return func(p *Phase) (float64, bool) { return f(p), true }
	}
	rows := []row{
		{"TCP 1 stream A→B (Mbit/s)", 0, always(func(p *Phase) float64 { return p.TCPMbps })},
		{"ratio to baseline", 2, func(p *Phase) (float64, bool) { return p.Ratio, p.Ratio != 0 }},
		{"TCP retransmits (segments)", 0, always(func(p *Phase) float64 { return p.Retransmits })},
		{"flood achieved, counted by the flooder (packets/s)", 0, flood(func(f *flooder.Result) float64 { return f.PPS })},
		{"flood datagrams sent", 0, flood(func(f *flooder.Result) float64 { return float64(f.Sent) })},
		{"flood send errors", 0, flood(func(f *flooder.Result) float64 { return float64(f.SendErrors) })},
		{"flood datagrams skipped, flooder not running when due", 0, flood(func(f *flooder.Result) float64 { return float64(f.Behind) })},
		{"flooder CPU (% of one core)", 0, flood(func(f *flooder.Result) float64 { return f.CPUPct() })},
		{"gateway B CPU (% of one core)", 0, always(func(p *Phase) float64 { return p.GatewayCPUPct })},
		{"gateway A CPU (% of one core)", 0, always(func(p *Phase) float64 { return p.GatewayACPUPct })},
		{fmt.Sprintf("machine CPU busy (%% of %d CPUs)", h.CPUs), 0, always(func(p *Phase) float64 { return p.MachineBusyPct })},
		{"gateway B VmRSS before (MiB)", 1, always(func(p *Phase) float64 { return kib2mib(p.RSSBeforeKiB) })},
		{"gateway B VmRSS after (MiB)", 1, always(func(p *Phase) float64 { return kib2mib(p.RSSAfterKiB) })},
		{"gateway B VmRSS peak (MiB)", 1, always(func(p *Phase) float64 { return kib2mib(p.RSSPeakKiB) })},
		{"gateway B VmRSS growth (MiB)", 1, always(func(p *Phase) float64 { return p.RSSGrowthMiB })},
		{"gateway B UDP datagrams received (kernel)", 0, always(func(p *Phase) float64 { return p.UDP["InDatagrams"] })},
		{"gateway B UDP receive buffer overflows (kernel)", 0, always(func(p *Phase) float64 { return p.UDP["RcvbufErrors"] })},
		{"gateway B UDP datagrams to closed ports (kernel)", 0, always(func(p *Phase) float64 { return p.UDP["NoPorts"] })},
		{"softnet backlog drops, whole machine", 0, always(func(p *Phase) float64 { return p.SoftnetDrops })},
	}
	for _, reason := range Reasons {
		rows = append(rows, row{"dropped: " + reason, 0, always(func(p *Phase) float64 { return p.Drops["outside/"+reason] })})
	}
	rows = append(rows,
		row{"dropped: other reasons, both directions", 0, always(func(p *Phase) float64 {
			var n float64
			for k, v := range p.Drops {
				if r, ok := strings.CutPrefix(k, "outside/"); !ok || !slices.Contains(Reasons, r) {
					n += v
				}
			}
			return n
		})},
		row{"DH operations", 0, always(func(p *Phase) float64 { return p.DHOps })},
		row{"cookie replies sent", 0, always(func(p *Phase) float64 { return p.CookieReplies })},
		row{"legitimate handshake events", 0, always(func(p *Phase) float64 {
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
				fmt.Fprintf(&b, " %s |", results.FormatValue(x, rw.decimals))
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
			i := slices.IndexFunc(r.Targets, func(t Target) bool { return t.Phase == ph && t.Name == tg.key })
			if i < 0 {
				b.WriteString(" – |")
				continue
			}
			t := r.Targets[i]
			v := results.FormatValue(t.Value, 0)
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
