package control

import (
	"bytes"
	"flag"
	"path/filepath"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/relay"

	"github.com/bridgehead/bridgehead/internal/golden"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden")

func TestRenderGolden(t *testing.T) {
	ready := Status{
		Version: "v1.2.3", Site: "a", Gateway: "gw-a1",
		ConfigPath: "/etc/bridgehead/bridgehead.yaml", ConfigHash: "3f2a9c01",
		ConfigLoaded: t0.Add(-40 * time.Second), Started: t0.Add(-3 * time.Minute),
		Ready: true, AllSites: true,
		Sites: []health.SiteReport{{Site: "b", Ready: true, Gateways: []health.GatewayReport{
			{Gateway: "gw-b1", State: health.StateUp, LastReceive: t0.Add(-time.Second)},
		}}},
		Peers: []health.PeerState{{Site: "b", Gateway: "gw-b1", Endpoint: sampleStatus().Peers[0].Endpoint, Path: health.PathDirect,
			LastHandshake: t0.Add(-61 * time.Second), LastReceive: t0.Add(-time.Second), RxBytes: 100, TxBytes: 2048}},
	}
	tests := []struct {
		name string
		s    Status
	}{
		{"status_not_ready", sampleStatus()},
		{"status_ready", ready},
		{"status_empty", Status{}},
		{"status_relay", withRelay(ready)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var buf bytes.Buffer
			Render(&buf, &tt.s, t0)
			golden.Check(t, filepath.Join("testdata", tt.name+".golden"), buf.Bytes(), *update)
		})
	}
}

func TestAgo(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{0, "0s ago"},
		{-5 * time.Second, "0s ago"},
		{12*time.Second + 900*time.Millisecond, "12s ago"},
		{59 * time.Second, "59s ago"},
		{time.Minute, "1m0s ago"},
		{3*time.Minute + 4*time.Second, "3m4s ago"},
		{2*time.Hour + 5*time.Minute + 59*time.Second, "2h5m ago"},
		{26 * time.Hour, "1d2h ago"},
		{400 * 24 * time.Hour, "400d0h ago"},
	}
	for _, tt := range tests {
		if got := ago(t0.Add(-tt.d), t0); got != tt.want {
			t.Errorf("ago(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
	if got := ago(time.Time{}, t0); got != "never" {
		t.Errorf("ago(zero) = %q, want never", got)
	}
}

func TestBytes(t *testing.T) {
	tests := []struct {
		n    uint64
		want string
	}{
		{0, "0 B"},
		{1023, "1023 B"},
		{1024, "1.0 KiB"},
		{1536, "1.5 KiB"},
		{3_500_000, "3.3 MiB"},
		{1 << 30, "1.0 GiB"},
		{5 << 40, "5.0 TiB"},
		{^uint64(0), "16.0 EiB"},
	}
	for _, tt := range tests {
		if got := humanBytes(tt.n); got != tt.want {
			t.Errorf("bytes(%d) = %q, want %q", tt.n, got, tt.want)
		}
	}
}

// withRelay is s with a relay that has open connections and refusals.
func withRelay(s Status) Status {
	s.Relay = &relay.Status{Listen: "10.224.0.4:8131", TLS: true, AllowedPorts: []uint16{10250}, Active: 3, Total: 120,
		Refused: []relay.RefusedBy{{Reason: "local_site", Count: 2}, {Reason: "port", Count: 1}},
		BySite:  []relay.SiteActive{{Site: "b", Active: 3}}}
	return s
}
