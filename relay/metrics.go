package relay

import "github.com/prometheus/client_golang/prometheus"

// metrics are the relay's series, registered on the registry New gets.
type metrics struct {
	active   prometheus.Gauge
	total    prometheus.Counter
	bytes    *prometheus.CounterVec
	toDest   prometheus.Counter
	toClient prometheus.Counter
	refused  *prometheus.CounterVec
	closed   *prometheus.CounterVec
	dial     prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		active: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_relay_connections_active", Help: "Relayed connections open now.",
		}),
		total: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_relay_connections_total", Help: "Connections the relay established (200 sent).",
		}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_relay_bytes_total", Help: "Bytes relayed, by direction (to_destination, to_client).",
		}, []string{"direction"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_relay_refused_total", Help: "Connections the relay refused or cut off before relaying, by reason.",
		}, []string{"reason"}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_relay_closed_total", Help: "Relayed connections closed, by reason (done, idle, revoked, shutdown, error).",
		}, []string{"reason"}),
		dial: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bridgehead_relay_dial_duration_seconds", Help: "Time to connect to the destination through the tunnel.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}),
	}
	m.toDest = m.bytes.WithLabelValues("to_destination")
	m.toClient = m.bytes.WithLabelValues("to_client")
	for _, r := range Reasons() {
		m.refused.WithLabelValues(string(r))
	}
	for _, r := range closeReasons {
		m.closed.WithLabelValues(r)
	}
	for _, c := range []prometheus.Collector{m.active, m.total, m.bytes, m.refused, m.closed, m.dial} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}
