package promtext

import (
	"bytes"
	"math"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

const page = `# HELP bridgehead_dropped_packets_total Packets not forwarded, by direction and reason.
# TYPE bridgehead_dropped_packets_total counter
bridgehead_dropped_packets_total{direction="outside",reason="bad_mac"} 1.234567e+06
bridgehead_dropped_packets_total{direction="inside",reason="bad_mac"} 0
bridgehead_handshake_dh_operations_total 3
bridgehead_peer_endpoint_info{endpoint="203.0.113.1:51820",gateway="gw-a1",site="site-a"} 1
odd{label="a \"quoted\" value",x="y"} 2 1700000000000
`

func TestParse(t *testing.T) {
	ss, err := Parse([]byte(page))
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 5 {
		t.Fatalf("%d samples: %v", len(ss), ss)
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridgehead_dropped_packets_total", map[string]string{"direction": "outside", "reason": "bad_mac"}, 1234567},
		{"bridgehead_dropped_packets_total", map[string]string{"direction": "inside", "reason": "bad_mac"}, 0},
		{"bridgehead_handshake_dh_operations_total", nil, 3},
		{"odd", map[string]string{"label": `a "quoted" value`, "x": "y"}, 2},
		{"odd", map[string]string{"label": `a "quoted" value`}, 0}, // labels must match exactly
		{"missing", nil, 0},
	}
	for _, c := range cases {
		if got := Value(ss, c.name, c.labels); got != c.want {
			t.Errorf("Value(%s, %v) = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"novalue\n", "x{a=\"b} 1\n", "x notanumber\n", "# TYPE x counter\n# TYPE x gauge\nx 1\n"} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("%q: no error", bad)
		} else if !strings.Contains(err.Error(), "line") {
			t.Errorf("%q: error %q does not name the line", bad, err)
		}
	}
}

// TestRegistryPage parses the page client_golang serves, with the metric
// types bridgehead registers, as scrapeMetrics gets it from a gateway.
func TestRegistryPage(t *testing.T) {
	reg := prometheus.NewRegistry()
	drops := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_dropped_packets_total", Help: "h"}, []string{"direction", "reason"})
	peers := prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_peers", Help: "h"})
	hist := prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bridgehead_handshake_seconds", Help: "h", Buckets: []float64{0.005, 0.1}})
	sum := prometheus.NewSummary(prometheus.SummaryOpts{Name: "bridgehead_batch_size", Help: "h", Objectives: map[float64]float64{0.5: 0.05}})
	reg.MustRegister(drops, peers, hist, sum)
	drops.WithLabelValues("outside", "runt").Add(187500)
	drops.WithLabelValues("inside", "no_route").Inc()
	peers.Set(2)
	hist.Observe(0.001)
	hist.Observe(0.05)
	hist.Observe(3)
	sum.Observe(7)

	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body bytes.Buffer
	body.ReadFrom(resp.Body)
	ss, err := Parse(body.Bytes())
	if err != nil {
		t.Fatalf("%v\n%s", err, body.String())
	}
	cases := []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"bridgehead_dropped_packets_total", map[string]string{"direction": "outside", "reason": "runt"}, 187500},
		{"bridgehead_dropped_packets_total", map[string]string{"direction": "inside", "reason": "no_route"}, 1},
		{"bridgehead_peers", nil, 2},
		{"bridgehead_handshake_seconds_bucket", map[string]string{"le": "0.005"}, 1},
		{"bridgehead_handshake_seconds_bucket", map[string]string{"le": "0.1"}, 2},
		{"bridgehead_handshake_seconds_bucket", map[string]string{"le": "+Inf"}, 3},
		{"bridgehead_handshake_seconds_count", nil, 3},
		{"bridgehead_handshake_seconds_sum", nil, 3.051},
		{"bridgehead_batch_size", map[string]string{"quantile": "0.5"}, 7},
		{"bridgehead_batch_size_count", nil, 1},
	}
	for _, c := range cases {
		if got := Value(ss, c.name, c.labels); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("Value(%s, %v) = %g, want %g", c.name, c.labels, got, c.want)
		}
	}
}

func FuzzParse(f *testing.F) {
	f.Add([]byte(page))
	f.Add([]byte("# TYPE h histogram\nh_bucket{le=\"1\"} 2\nh_bucket{le=\"+Inf\"} 3\nh_sum 4\nh_count 3\n"))
	f.Add([]byte("# TYPE s summary\ns{quantile=\"0.5\"} 1\ns_sum 2\ns_count 1\n"))
	f.Add([]byte("x{a=\"b\\n\\\\\"} NaN\ny -Inf 12\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ss, err := Parse(b)
		if err != nil {
			return
		}
		for _, s := range ss {
			if s.Name == "" || s.Labels == nil {
				t.Errorf("sample %+v from %q", s, b)
			}
			if Value(ss, s.Name, s.Labels) != s.Value && !math.IsNaN(s.Value) && !duplicate(ss, s) {
				t.Errorf("Value does not find %+v", s)
			}
		}
	})
}

// duplicate reports whether another sample has s's name and labels (the
// text format allows it; Value returns the first).
func duplicate(ss []Sample, s Sample) bool {
	n := 0
	for _, o := range ss {
		if o.Name == s.Name && len(o.Labels) == len(s.Labels) {
			same := true
			for k, v := range s.Labels {
				if o.Labels[k] != v {
					same = false
				}
			}
			if same {
				n++
			}
		}
	}
	return n > 1
}
