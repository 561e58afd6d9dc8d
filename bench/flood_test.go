package bench

import (
	crand "crypto/rand"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

func TestGarbagePacket(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	var random, runts, transport int
	var big, firstBytes = 0, map[byte]bool{}
	for i := range 8000 {
		b := GarbagePacket(rng, i)
		switch k := i % 8; {
		case k < 4:
			random++
			if len(b) < 1 || len(b) > 1400 {
				t.Fatalf("random packet %d: %d bytes", i, len(b))
			}
			if len(b) > 1000 {
				big++
			}
			firstBytes[b[0]] = true
		case k == 4:
			runts++
			if len(b) < 1 || len(b) > 3 {
				t.Fatalf("runt %d: %d bytes", i, len(b))
			}
		default:
			transport++
			if len(b) < 32 || len(b) > 1400 {
				t.Fatalf("transport-looking %d: %d bytes", i, len(b))
			}
			if b[0] != bhcrypto.MsgTransport || b[1] != 0 || b[2] != 0 || b[3] != 0 {
				t.Fatalf("transport-looking %d: header % x", i, b[:4])
			}
		}
	}
	if random != 4000 || runts != 1000 || transport != 3000 {
		t.Errorf("mix: %d random, %d runts, %d transport; want 4000, 1000, 3000", random, runts, transport)
	}
	// Sizes spread over 1..1400 and first bytes over most values.
	if big < 800 || len(firstBytes) < 200 {
		t.Errorf("random packets look little random: %d over 1000 bytes, %d first bytes", big, len(firstBytes))
	}
}

func TestBadMACInitiation(t *testing.T) {
	priv, err := bhcrypto.GeneratePrivateKey(crand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := priv.PublicKey()
	rng := rand.New(rand.NewPCG(3, 4))
	seen := map[string]bool{}
	for i := range 1000 {
		b := BadMACInitiation(rng)
		if len(b) != bhcrypto.InitiationSize {
			t.Fatalf("%d bytes, want %d", len(b), bhcrypto.InitiationSize)
		}
		if b[0] != bhcrypto.MsgInitiation || b[1] != 0 || b[2] != 0 || b[3] != 0 {
			t.Fatalf("header % x", b[:4])
		}
		var zero [16]byte
		if string(b[floodMAC2Off:]) != string(zero[:]) {
			t.Fatalf("mac2 % x, want zero", b[floodMAC2Off:])
		}
		if string(b[floodMAC1Off:floodMAC2Off]) == string(zero[:]) {
			t.Fatal("mac1 is zero")
		}
		// What the gateway checks first, before any queue or DH.
		if bhcrypto.CheckMAC1(b, pub) {
			t.Fatalf("message %d has a valid mac1", i)
		}
		seen[string(b[4:8])] = true
	}
	if len(seen) < 990 {
		t.Errorf("%d distinct sender indexes in 1000", len(seen))
	}
}

func TestFloodPool(t *testing.T) {
	for _, kind := range []string{FloodGarbage, FloodBadMAC} {
		p, err := floodPool(kind, 64, 7)
		if err != nil || len(p) != 64 {
			t.Fatalf("%s: %d packets, %v", kind, len(p), err)
		}
		again, _ := floodPool(kind, 64, 7)
		if string(p[10]) != string(again[10]) {
			t.Errorf("%s: the same seed gives different pools", kind)
		}
	}
	if _, err := floodPool("nonsense", 8, 1); err == nil {
		t.Error("unknown kind: no error")
	}
}

func TestTokenBucket(t *testing.T) {
	t0 := time.Unix(1000, 0)
	b := newTokenBucket(1000, 10, t0)
	if n := b.take(t0, 5); n != 0 {
		t.Errorf("at start: took %d", n)
	}
	if n := b.take(t0.Add(4*time.Millisecond), 10); n != 4 {
		t.Errorf("after 4 ms at 1000/s: took %d, want 4", n)
	}
	if w := b.wait(3); w != 3*time.Millisecond {
		t.Errorf("wait(3) = %s, want 3ms", w)
	}
	// A second away: the bucket holds 10, the other 990 are lost.
	if n := b.take(t0.Add(1004*time.Millisecond), 100); n != 10 {
		t.Errorf("after a second: took %d, want the burst 10", n)
	}
	if math.Abs(b.lost-990) > 1e-6 {
		t.Errorf("lost %g, want 990", b.lost)
	}
}

// TestSendFlood sends a short flood to a loopback socket: no root needed.
func TestSendFlood(t *testing.T) {
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	conn.SetReadBuffer(4 << 20)
	to := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	got := make(chan [2]int, 1)
	go func() {
		buf := make([]byte, 2000)
		n, bad := 0, 0
		for {
			conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			k, err := conn.Read(buf)
			if err != nil {
				got <- [2]int{n, bad}
				return
			}
			n++
			if k != 148 || buf[0] != 1 {
				bad++
			}
		}
	}()
	res, err := SendFlood(FloodWorkerOptions{To: netip.AddrPortFrom(to.Addr(), to.Port()), PPS: 20000, Kind: FloodBadMAC, Duration: 300 * time.Millisecond, Batch: 16, Seed: 9}, nil)
	if err != nil {
		t.Fatal(err)
	}
	r := <-got
	// 6000 due; allow a slow test machine.
	if res.Sent < 2000 || res.Sent > 6100 || res.Bytes != res.Sent*148 {
		t.Errorf("sent %d datagrams, %d bytes in %.3f s; want about 6000 of 148 bytes", res.Sent, res.Bytes, res.Seconds)
	}
	if r[0] == 0 || r[1] != 0 {
		t.Errorf("received %d datagrams, %d not a 148-byte initiation", r[0], r[1])
	}
	if _, err := SendFlood(FloodWorkerOptions{To: netip.AddrPortFrom(to.Addr(), to.Port()), PPS: 0, Kind: FloodBadMAC, Duration: time.Second}, nil); err == nil {
		t.Error("-pps 0: no error")
	}
}

func TestParseFloodResult(t *testing.T) {
	out := "some warning\n{\"kind\":\"garbage\",\"to\":\"203.0.113.2:51820\",\"sent\":1200,\"seconds\":1.5,\"pps\":800}\n"
	r, err := ParseFloodResult([]byte(out))
	if err != nil || r.Kind != FloodGarbage || r.Sent != 1200 || r.PPS != 800 {
		t.Errorf("%+v, %v", r, err)
	}
	if _, err := ParseFloodResult([]byte("flood-worker: connect: refused\n")); err == nil {
		t.Error("no result: no error")
	}
}

// sampleFloodReport is a fixed flood report for the golden tests: its
// numbers are made up and are not measurements.
func sampleFloodReport() *FloodReport {
	drops := func(kv ...any) map[string]float64 {
		m := map[string]float64{}
		for _, r := range FloodReasons {
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
	r := &FloodReport{
		Measurement: "flood",
		Started:     "2026-01-02T03:04:05Z",
		Finished:    "2026-01-02T03:05:05Z",
		Host:        Host{Kernel: "6.18.0-test", CPUs: 2, CPUModel: "Test CPU", Bridgehead: "bridgehead v0.0.0-test", Iperf3: "iperf 3.12"},
		Settings:    FloodSettings{Variant: "bridgehead-aesgcm", DurationS: 8, LeadS: 1, TargetPPS: 150000, Batch: 64, FloodFrom: "198.51.100.2", FloodTo: "203.0.113.2:51820", TunMTU: 1420, WANMTU: 1500, Control: true},
		Phases: []FloodPhase{
			{Name: PhaseBaseline, TCPMbps: 2000, Retransmits: 3, WindowS: 8.6, RSSBeforeKiB: 30000, RSSAfterKiB: 30100, RSSPeakKiB: 30200, RSSGrowthMiB: 0.1953125,
				GatewayCPUPct: 60, GatewayACPUPct: 70, MachineBusyPct: 90, Drops: drops(), UDP: udp(150000, 0)},
			{Name: PhaseControl, Kind: FloodGarbage, TCPMbps: 1950, Retransmits: 20, WindowS: 10.6, RSSBeforeKiB: 30100, RSSAfterKiB: 30100, RSSPeakKiB: 30100,
				GatewayCPUPct: 55, GatewayACPUPct: 65, MachineBusyPct: 100,
				Flood: &FloodResult{Kind: FloodGarbage, To: "203.0.113.2:51821", TargetPPS: 150000, Sent: 1500000, Bytes: 500000000, Seconds: 10, PPS: 150000, CPUUserS: 0.1, CPUSysS: 3.9},
				Drops: drops(), UDP: map[string]float64{"InDatagrams": 140000, "NoPorts": 1500000}},
			{Name: PhaseGarbage, Kind: FloodGarbage, TCPMbps: 1900, Retransmits: 40, WindowS: 10.6, RSSBeforeKiB: 30100, RSSAfterKiB: 30500, RSSPeakKiB: 30600, RSSGrowthMiB: 0.48828125,
				GatewayCPUPct: 95, GatewayACPUPct: 60, MachineBusyPct: 100,
				Flood: &FloodResult{Kind: FloodGarbage, To: "203.0.113.2:51820", TargetPPS: 150000, Sent: 1500000, Bytes: 500000000, Seconds: 10, PPS: 150000, CPUUserS: 0.1, CPUSysS: 4.9},
				Drops: drops("outside/runt", 187500, "outside/unknown_type", 740000, "outside/unknown_index", 562500, "outside/bad_size", 10000), UDP: udp(1600000, 100)},
			{Name: PhaseBadMAC, Kind: FloodBadMAC, TCPMbps: 1700, Retransmits: 90, WindowS: 10.6, RSSBeforeKiB: 30500, RSSAfterKiB: 40000, RSSPeakKiB: 42000, RSSGrowthMiB: 11.23046875,
				GatewayCPUPct: 110, GatewayACPUPct: 55, MachineBusyPct: 100,
				Flood: &FloodResult{Kind: FloodBadMAC, To: "203.0.113.2:51820", TargetPPS: 150000, Sent: 950000, Bytes: 140600000, Behind: 550000, Seconds: 10, PPS: 95000, CPUUserS: 0.1, CPUSysS: 3.9},
				Drops: drops("outside/bad_mac", 950000), UDP: udp(1100000, 0)},
			{Name: PhaseBaselineAfter, TCPMbps: 2100, Retransmits: 2, WindowS: 8.6, RSSBeforeKiB: 40000, RSSAfterKiB: 40000, RSSPeakKiB: 40000,
				GatewayCPUPct: 62, GatewayACPUPct: 71, MachineBusyPct: 91, Drops: drops(), Handshakes: map[string]float64{"initiated": 1, "completed": 1}, DHOps: 1, UDP: udp(160000, 0)},
		},
	}
	r.Evaluate()
	return r
}

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
	golden(t, "flood.md", []byte(md))
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
	golden(t, "flood.json", b)
	var back FloodReport
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	if back.Measurement != "flood" || len(back.Phases) != 5 || back.Phases[3].Drops["outside/bad_mac"] != 950000 || back.Phases[3].Flood.PPS != 95000 {
		t.Errorf("round trip: %+v", back)
	}
}
