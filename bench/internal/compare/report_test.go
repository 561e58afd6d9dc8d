package compare

import (
	"encoding/json"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/bench/internal/results"

	"github.com/bridgehead/bridgehead/internal/golden"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden")

// sampleReport is a fixed report for the golden tests: its numbers are
// made up and are not measurements.
func sampleReport() *Report {
	r := &Report{
		Started:  "2026-01-02T03:04:05Z",
		Finished: "2026-01-02T03:14:05Z",
		Host:     results.Host{Kernel: "6.18.0-test", CPUs: 2, CPUModel: "Test CPU", Bridgehead: "bridgehead v0.0.0-test", Iperf3: "iperf 3.12", WireguardGo: "wireguard-go v0.0.0-test"},
		Settings: Settings{Runs: 3, DurationS: 10, TunMTU: 1420, WANMTU: 1500, Streams: 4, UDPSize: 64, UDPBitrate: "0", PingInterval: "20ms"},
		Variants: []string{"kernel", "bridgehead-aesgcm", "bridgehead-chachapoly", "wireguard-go"},
	}
	base := map[string]map[string]float64{
		"kernel":                {MRTTLoadLoss: 0, MTCP1: 10000, MTCPN: 12000, MTCPRev: 9000, MRetransmits: 10, MUDPPPS: 400000, MUDPLoss: 20, MRTTIdle50: 0.05, MRTTIdle99: 0.2, MRTTLoad50: 0.1, MRTTLoad99: 0.5, MRRLoad50: 0.15, MRRLoad99: 0.6, MRRLoadLoss: 0, MRTTLoadK50: 0.08, MRTTLoadK99: 0.3, MRRLoadK50: 0.12, MRRLoadK99: 0.4, MSoftirq: 0.3},
		"bridgehead-aesgcm":     {MRTTLoadLoss: 5, MTCP1: 2000, MTCPN: 2500, MTCPRev: 1900, MRetransmits: 100, MUDPPPS: 150000, MUDPLoss: 50, MRTTIdle50: 0.3, MRTTIdle99: 1, MRTTLoad50: 2, MRTTLoad99: 8, MRRLoad50: 2.2, MRRLoad99: 8.5, MRRLoadLoss: 1, MRTTLoadK50: 0.4, MRTTLoadK99: 0.9, MRRLoadK50: 0.5, MRRLoadK99: 1.1, MCPUA: 4, MCPUB: 4.5, MSoftirq: 1, MExpressN: 3300, MStrays: 0},
		"bridgehead-chachapoly": {MTCP1: 1500, MTCPN: 1800, MTCPRev: 1400, MRetransmits: 120, MUDPPPS: 140000, MUDPLoss: 55, MRTTIdle50: 0.3, MRTTIdle99: 1.2, MRTTLoad50: 2.5, MRTTLoad99: 9, MCPUA: 5, MCPUB: 5.5, MSoftirq: 1.1},
		"wireguard-go":          {MTCP1: 1600, MTCPN: 2000, MTCPRev: 1500, MRetransmits: 20, MUDPPPS: 100000, MUDPLoss: 60, MRTTIdle50: 0.4, MRTTIdle99: 1.5, MRTTLoad50: 8, MRTTLoad99: 30, MCPUA: 2.5, MCPUB: 2.6, MSoftirq: 0.8},
	}
	for run := 1; run <= 3; run++ {
		for _, v := range r.Variants {
			vals := map[string]float64{}
			for k, x := range base[v] {
				vals[k] = x * (1 + 0.1*float64(run-2)) // median: run 2's
			}
			r.Samples = append(r.Samples, Sample{Variant: v, Run: run, Values: vals})
		}
	}
	r.Samples = append(r.Samples, Sample{Variant: "wireguard-go", Run: 4, Values: map[string]float64{MRTTIdle99: math.NaN()}, Error: "wg-a exited during the measurement: signal: killed\nlog line"})
	r.Summarize()
	return r
}

func TestGoldenMarkdown(t *testing.T) {
	r := sampleReport()
	md := r.Markdown()
	golden.Check(t, filepath.Join("testdata", "golden", "results.md"), []byte(md), *update)
	for _, want := range []string{"| TCP 1 stream A→B (Mbit/s) | 10,000 | 2,000 | 1,500 | 1,600 |", "bridgehead-aesgcm ÷ wireguard-go", "| runs completed | 3/3 | 3/3 | 3/3 | 3/3 |", "wireguard-go run 4: wg-a exited"} {
		if !strings.Contains(md, want) {
			t.Errorf("markdown lacks %q", want)
		}
	}
}

func TestGoldenJSON(t *testing.T) {
	b, err := sampleReport().JSON()
	if err != nil {
		t.Fatal(err)
	}
	golden.Check(t, filepath.Join("testdata", "golden", "results.json"), b, *update)
	var back Report
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Medians["bridgehead-aesgcm"][MTCP1]; got != 2000 {
		t.Errorf("round trip: median tcp1 = %g", got)
	}
	if _, ok := back.Medians["kernel"][MCPUA]; ok {
		t.Error("kernel has a gateway CPU median")
	}
}

func TestGoldenSVG(t *testing.T) {
	svg := sampleReport().SVG()
	golden.Check(t, filepath.Join("testdata", "golden", "results.svg"), []byte(svg), *update)
	if !strings.HasPrefix(svg, "<svg ") || !strings.HasSuffix(svg, "</svg>\n") || strings.Contains(svg, "NaN") {
		t.Error("malformed SVG")
	}
	// Well-formed XML.
	dec := xmlDecoder(svg)
	for {
		if _, err := dec.Token(); err != nil {
			if err.Error() != "EOF" {
				t.Fatalf("SVG is not well-formed XML: %v", err)
			}
			break
		}
	}
}

func TestNiceCeil(t *testing.T) {
	for x, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.2: 2, 2.2: 2.5, 4: 5, 7: 10, 10.5: 20, 12000: 20000} {
		if got := niceCeil(x); math.Abs(got-want) > 1e-9 {
			t.Errorf("niceCeil(%g) = %g, want %g", x, got, want)
		}
	}
}

func TestWriteFiles(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "out")
	paths, err := sampleReport().WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("paths %v", paths)
	}
	for _, p := range paths {
		if st, err := os.Stat(p); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", p, err)
		}
	}
}

// TestGatewaySchedRecorded: a run under -gateway-sched says so in the
// Markdown header and in results.json, with each sample's thread counts.
func TestGatewaySchedRecorded(t *testing.T) {
	r := sampleReport()
	r.Settings.GatewaySched = "fifo:10"
	r.Samples[1].GatewaySched = []string{"gw-a 14/14 fifo:10", "gw-b 13/13 fifo:10"}
	if md := r.Markdown(); !strings.Contains(md, "under scheduling policy fifo:10 (-gateway-sched") {
		t.Errorf("markdown does not name the policy:\n%s", md)
	}
	j, err := r.JSON()
	if err != nil {
		t.Fatal(err)
	}
	var back struct {
		Settings struct {
			GatewaySched string `json:"gateway_sched"`
		} `json:"settings"`
		Samples []struct {
			GatewaySched []string `json:"gateway_sched_threads"`
		} `json:"samples"`
	}
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if back.Settings.GatewaySched != "fifo:10" || len(back.Samples) < 2 || len(back.Samples[1].GatewaySched) != 2 {
		t.Errorf("results.json: settings.gateway_sched %q, sample 1 threads %v", back.Settings.GatewaySched, back.Samples[1].GatewaySched)
	}
	// Without the control the golden files stay as they were (omitempty).
	if j, _ := sampleReport().JSON(); strings.Contains(string(j), "gateway_sched") {
		t.Error("results.json names gateway_sched without the control")
	}
}

// TestSetLoaded: percentiles of both clocks, and the loss only when
// probes were sent.
func TestSetLoaded(t *testing.T) {
	v := map[string]float64{}
	keys := [5]string{"p50", "p99", "k50", "k99", "loss"}
	setLoaded(v, keys, []float64{1, 2, 3, 4}, []float64{0.5, 0.5, 0.5, 0.5}, 5, 1)
	if v["p50"] <= 1 || v["p50"] >= 4 || v["p99"] < v["p50"] || v["k50"] != 0.5 || v["k99"] != 0.5 || v["loss"] != 20 {
		t.Errorf("values %v", v)
	}
	none := map[string]float64{}
	setLoaded(none, keys, nil, nil, 0, 0)
	if _, ok := none["loss"]; ok {
		t.Errorf("loss recorded with nothing sent: %v", none)
	}
}
