package flood

import (
	"encoding/json"
	"flag"
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/bench/internal/flooder"
	"github.com/bridgehead/bridgehead/bench/internal/results"

	"github.com/bridgehead/bridgehead/internal/golden"
)

// sampleFloodReport is a fixed flood report for the golden tests: its
// numbers are made up and are not measurements.
func sampleFloodReport() *Report {
	drops := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for _, r := range Reasons {
			m["outside/"+r] = 0
		}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = float64(kv[i+1].(int))
		}
		return m
	}
	udp := func(in, over int) map[string]float64 {
		return map[string]float64{"InDatagrams": float64(in), "RcvbufErrors": float64(over), "InErrors": float64(over)}
	}
	r := &Report{
		Measurement: "flood",
		Started:     "2026-01-02T03:04:05Z",
		Finished:    "2026-01-02T03:05:05Z",
		Host:        results.Host{Kernel: "6.18.0-test", CPUs: 2, CPUModel: "Test CPU", Bridgehead: "bridgehead v0.0.0-test", Iperf3: "iperf 3.12"},
		Settings:    Settings{Variant: "bridgehead-aesgcm", DurationS: 8, LeadS: 1, TargetPPS: 150000, Batch: 64, FloodFrom: "198.51.100.2", FloodTo: "203.0.113.2:51820", TunMTU: 1420, WANMTU: 1500, Control: true},
		Phases: []Phase{
			{Name: PhaseBaseline, TCPMbps: 2000, Retransmits: 3, WindowS: 8.6, RSSBeforeKiB: 30000, RSSAfterKiB: 30100, RSSPeakKiB: 30200, RSSGrowthMiB: 0.1953125,
				GatewayCPUPct: 60, GatewayACPUPct: 70, MachineBusyPct: 90, Drops: drops(), UDP: udp(150000, 0)},
			{Name: PhaseControl, Kind: flooder.Garbage, TCPMbps: 1950, Retransmits: 20, WindowS: 10.6, RSSBeforeKiB: 30100, RSSAfterKiB: 30100, RSSPeakKiB: 30100,
				GatewayCPUPct: 55, GatewayACPUPct: 65, MachineBusyPct: 100,
				Flood: &flooder.Result{Kind: flooder.Garbage, To: "203.0.113.2:51821", TargetPPS: 150000, Sent: 1500000, Bytes: 500000000, Seconds: 10, PPS: 150000, CPUUserS: 0.1, CPUSysS: 3.9},
				Drops: drops(), UDP: map[string]float64{"InDatagrams": 140000, "NoPorts": 1500000}},
			{Name: PhaseGarbage, Kind: flooder.Garbage, TCPMbps: 1900, Retransmits: 40, WindowS: 10.6, RSSBeforeKiB: 30100, RSSAfterKiB: 30500, RSSPeakKiB: 30600, RSSGrowthMiB: 0.48828125,
				GatewayCPUPct: 95, GatewayACPUPct: 60, MachineBusyPct: 100,
				Flood: &flooder.Result{Kind: flooder.Garbage, To: "203.0.113.2:51820", TargetPPS: 150000, Sent: 1500000, Bytes: 500000000, Seconds: 10, PPS: 150000, CPUUserS: 0.1, CPUSysS: 4.9},
				Drops: drops("outside/runt", 187500, "outside/unknown_type", 740000, "outside/unknown_index", 562500, "outside/bad_size", 10000), UDP: udp(1600000, 100)},
			{Name: PhaseBadMAC, Kind: flooder.BadMAC, TCPMbps: 1700, Retransmits: 90, WindowS: 10.6, RSSBeforeKiB: 30500, RSSAfterKiB: 40000, RSSPeakKiB: 42000, RSSGrowthMiB: 11.23046875,
				GatewayCPUPct: 110, GatewayACPUPct: 55, MachineBusyPct: 100,
				Flood: &flooder.Result{Kind: flooder.BadMAC, To: "203.0.113.2:51820", TargetPPS: 150000, Sent: 950000, Bytes: 140600000, Behind: 550000, Seconds: 10, PPS: 95000, CPUUserS: 0.1, CPUSysS: 3.9},
				Drops: drops("outside/bad_mac", 950000), UDP: udp(1100000, 0)},
			{Name: PhaseBaselineAfter, TCPMbps: 2100, Retransmits: 2, WindowS: 8.6, RSSBeforeKiB: 40000, RSSAfterKiB: 40000, RSSPeakKiB: 40000,
				GatewayCPUPct: 62, GatewayACPUPct: 71, MachineBusyPct: 91, Drops: drops(), Handshakes: map[string]float64{"initiated": 1, "completed": 1}, DHOps: 1, UDP: udp(160000, 0)},
		},
	}
	r.Evaluate()
	return r
}

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

func TestFloodEvaluate(t *testing.T) {
	r := sampleFloodReport()
	got := map[string]bool{}
	for _, tg := range r.Targets {
		got[tg.Phase+" "+tg.Name] = tg.Met
	}
	want := map[string]bool{
		"garbage " + TThroughput: true, "garbage " + TRSS: true, "garbage " + TFloodRate: true,
		"badmac " + TThroughput: false, "badmac " + TRSS: true, "badmac " + TDH: true, "badmac " + TFloodRate: false,
	}
	if len(got) != len(want) {
		t.Errorf("targets %v, want %v", got, want)
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: met=%v (present %v), want %v", k, g, ok, w)
		}
	}
	if r.AllMet() {
		t.Error("AllMet with targets missed")
	}
	if p := r.phase(PhaseBadMAC); math.Abs(p.Ratio-0.85) > 1e-9 {
		t.Errorf("bad-MAC ratio %g, want 0.85", p.Ratio)
	}
	// The control phase gets a ratio but no verdicts.
	if p := r.phase(PhaseControl); math.Abs(p.Ratio-0.975) > 1e-9 {
		t.Errorf("control ratio %g, want 0.975", p.Ratio)
	}
	// A failed baseline: no throughput verdicts.
	r.Phases[0].Error = "iperf3: boom"
	r.Evaluate()
	for _, tg := range r.Targets {
		if tg.Name == TThroughput {
			t.Errorf("throughput verdict without a baseline: %+v", tg)
		}
	}
}

func TestGoldenFloodMarkdown(t *testing.T) {
	md := sampleFloodReport().Markdown()
	golden.Check(t, filepath.Join("testdata", "golden", "flood.md"), []byte(md), *update)
	for _, want := range []string{
		"| metric | baseline | control: garbage to a closed port | garbage flood | bad-MAC initiation flood | baseline after |",
		"| TCP 1 stream A→B (Mbit/s) | 2,000 | 1,950 | 1,900 | 1,700 | 2,100 |",
		"| ratio to baseline | – | 0.97 | 0.95 | 0.85 | 1.05 |",
		"| dropped: bad_mac | 0 | 0 | 0 | 950,000 | 0 |",
		"| gateway B UDP datagrams to closed ports (kernel) | 0 | 1,500,000 | 0 | 0 | 0 |",
		"| TCP throughput ≥ 90 % of baseline | met (0.95×) | **not met** (0.85×) |",
		"| zero DH operations for bad-MAC initiations | – | met (0) |",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestGoldenFloodJSON(t *testing.T) {
	b, err := sampleFloodReport().JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "flood.json"), b, *update)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Measurement != "flood" || len(back.Phases) != 5 || back.Phases[3].Drops["outside/bad_mac"] != 950000 || back.Phases[3].Flood.PPS != 95000 {
		t.Errorf("round trip: %+v", back)
	}
}
