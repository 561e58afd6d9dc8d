package docgen

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// writeTree writes files (path → contents) under a new root.
func writeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, data := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

const scanMetricsSrc = `package pkg

import "github.com/prometheus/client_golang/prometheus"

const help = "Help from a constant."

func metrics() {
	peer := []string{"site", "gateway"}
	_ = prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "bridgehead", Subsystem: "relay", Name: "bytes_total", Help: help}, []string{"direction"})
	_ = prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_ready", Help: "1 when " + "ready."})
	d := struct{ up *prometheus.Desc }{up: prometheus.NewDesc("bridgehead_peer_up", "1 while up.", append(peer, "path"), nil)}
	_ = prometheus.MustNewConstMetric(d.up, prometheus.GaugeValue, 1)
	_, _ = promreg.Results(nil, "bridgehead_writes_total", "Writes by result.")
}
`

func TestMetricsScan(t *testing.T) {
	root := writeTree(t, map[string]string{"pkg/m.go": scanMetricsSrc})
	ms, err := Metrics(root)
	if err != nil {
		t.Fatal(err)
	}
	want := []Metric{
		{Name: "bridgehead_peer_up", Type: "gauge", Help: "1 while up.", Labels: []string{"site", "gateway", "path"}, Package: "pkg"},
		{Name: "bridgehead_ready", Type: "gauge", Help: "1 when ready.", Package: "pkg"},
		{Name: "bridgehead_relay_bytes_total", Type: "counter", Help: "Help from a constant.", Labels: []string{"direction"}, Package: "pkg"},
		{Name: "bridgehead_writes_total", Type: "counter", Help: "Writes by result.", Labels: []string{"result"}, Package: "pkg"},
	}
	if !reflect.DeepEqual(ms, want) {
		t.Errorf("metrics\n%+v\nwant\n%+v", ms, want)
	}
}

// TestMetricsScanFailsLoudly: a declaration the scanner cannot read, or
// a metric name outside any declaration, is an error, not a metric left
// out of the reference.
func TestMetricsScanFailsLoudly(t *testing.T) {
	tests := []struct{ name, body, want string }{
		{"name from a variable", `n := "bridgehead_x"; _ = prometheus.NewGauge(prometheus.GaugeOpts{Name: n, Help: "h"})`, "bridgehead_x looks like a metric"},
		{"opts not a literal", `o := prometheus.GaugeOpts{}; _ = prometheus.NewGauge(o)`, "Opts that are not a literal"},
		{"labels from a call", `_ = prometheus.NewDesc("bridgehead_y", "h", labels(), nil)`, "NewDesc with a name, help or labels"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			src := "package pkg\n\nimport \"github.com/prometheus/client_golang/prometheus\"\n\nfunc labels() []string { return nil }\n\nfunc f() {\n" + tt.body + "\n}\n"
			_, err := Metrics(writeTree(t, map[string]string{"pkg/m.go": src}))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %v, want one saying %q", err, tt.want)
			}
		})
	}
}

func TestLogEventsScan(t *testing.T) {
	src := `package daemon

import (
	"context"
	"log/slog"
)

const msgStarted = "started"

func f(log *slog.Logger, ctx context.Context, err error) {
	log.Info(msgStarted, "site", "a", slog.Int("lanes", 2))
	log.Warn("slow", "took", 3)
	log.ErrorContext(ctx, "failed", "err", err)
	log.Log(ctx, slog.LevelWarn, "leveled", "k", 1)
	log.Debug("quiet", "k", 1)
	log.Log(ctx, slog.LevelDebug, "quiet too")
	log.Info(err.Error())
}
`
	root := writeTree(t, map[string]string{"daemon/d.go": src, "daemon/sub/s.go": "package sub\n"})
	pkgs, err := GatewayPackages(root)
	if err != nil {
		t.Fatal(err)
	}
	events, err := LogEvents(root, pkgs)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range events {
		got = append(got, e.Level+" "+e.Message+" ["+strings.Join(e.Keys, ",")+"] "+e.File)
	}
	want := []string{
		"INFO started [site,lanes] daemon/d.go",
		"WARN slow [took] daemon/d.go",
		"ERROR failed [err] daemon/d.go",
		"WARN leveled [k] daemon/d.go",
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("events\n%q\nwant\n%q", got, want)
	}
}

func TestRestartOnlyScan(t *testing.T) {
	src := `package reload

func restartOnly(old, next *Config) error {
	same := func(field, a, b string) {}
	same("site", old.Site, next.Site)
	same("interface.mtu", old.MTU, next.MTU)
	fmt.Sprint("not a field", 1, 2)
	return nil
}
`
	// The function moved into a subpackage: it is still found.
	got, err := RestartOnly(writeTree(t, map[string]string{"daemon/reload/r.go": src}))
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"site", "interface.mtu"}; !reflect.DeepEqual(got, want) {
		t.Errorf("fields %q, want %q", got, want)
	}
	if _, err := RestartOnly(writeTree(t, map[string]string{"daemon/d.go": "package daemon\n"})); err == nil {
		t.Error("no restartOnly function: no error")
	}
}
