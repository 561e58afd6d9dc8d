package follow

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

// metrics are a Follower's bridgehead_follow_* series.
type metrics struct {
	evaluations prometheus.Counter
	writes      prometheus.Counter
	refused     *prometheus.CounterVec
	watchErrors *prometheus.CounterVec
	connected   prometheus.Gauge
	lastSync    prometheus.Gauge
	lastWrite   prometheus.Gauge
	states      *prometheus.GaugeVec
}

func (m *metrics) register(reg prometheus.Registerer) error {
	m.evaluations = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bridgehead_follow_evaluations_total",
		Help: "Times the follower assembled the published catalog after a change of its ConfigMaps.",
	})
	m.writes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "bridgehead_follow_writes_total",
		Help: "Times the follower wrote a new catalog file.",
	})
	m.refused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bridgehead_follow_refused_total",
		Help: "Published catalogs not written, by state: incomplete (publication in progress), malformed, refused (failed the gateway's checks), write-failed.",
	}, []string{"state"})
	m.watchErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "bridgehead_follow_watch_errors_total",
		Help: "Failed list/watch requests of the catalog's informers, by reason: connection-refused, connection-lost, timeout, unauthorized, forbidden, expired (410, the informer relists), too-many-requests, server-error, other. The informers retry with backoff.",
	}, []string{"reason"})
	m.connected = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bridgehead_follow_connected",
		Help: "1 while the catalog's informers reach the API server (each one's last list or watch succeeded), 0 while one fails or before the first success.",
	})
	m.lastSync = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bridgehead_follow_last_sync_timestamp_seconds",
		Help: "When the API server last answered the catalog's informers: a list, a watch open for a second, a watch event (0: not since start). A healthy follower stamps it at least at every watch restart (client-go: every 5-10 min).",
	})
	promreg.Zero(m.watchErrors, allReasons...)
	m.lastWrite = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "bridgehead_follow_last_write_timestamp_seconds",
		Help: "When the follower last wrote the catalog file (0: not since start).",
	})
	m.states = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bridgehead_follow_state",
		Help: "1 for the follower's current state: waiting, current, incomplete, malformed, refused, write-failed.",
	}, []string{"state"})
	return promreg.Register(reg, m.evaluations, m.writes, m.refused, m.watchErrors, m.connected, m.lastSync, m.lastWrite, m.states)
}

// state sets the state gauge: 1 for s, 0 for every other.
func (m *metrics) state(s State) {
	for _, x := range allStates {
		v := 0.0
		if x == s {
			v = 1
		}
		m.states.WithLabelValues(string(x)).Set(v)
	}
}
