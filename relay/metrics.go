package relay

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

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
	// A relay restarted on another address (a reload) registers on the
	// same registry: it takes over the series of the one before, so the
	// counters keep counting.
	var err error
	m.active = promreg.Adopt(reg, m.active, &err)
	m.total = promreg.Adopt(reg, m.total, &err)
	m.bytes = promreg.Adopt(reg, m.bytes, &err)
	m.refused = promreg.Adopt(reg, m.refused, &err)
	m.closed = promreg.Adopt(reg, m.closed, &err)
	m.dial = promreg.Adopt(reg, m.dial, &err)
	if err != nil {
		return nil, err
	}
	m.toDest = m.bytes.WithLabelValues("to_destination")
	m.toClient = m.bytes.WithLabelValues("to_client")
	for _, r := range Reasons() {
		m.refused.WithLabelValues(string(r))
	}
	for _, r := range closeReasons {
		m.closed.WithLabelValues(r)
	}
	return m, nil
}
