package kubenode

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

// metrics are the Source's series. Only Load's goroutine writes them.
type metrics struct {
	skipped prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		skipped: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_node_catalog_skipped_entries",
			Help: "Problems of the catalog file last loaded that concern only other nodes or other sites: the agent skipped those entries and installed the rest (0: a clean catalog).",
		}),
	}
	if err := promreg.Register(reg, m.skipped); err != nil {
		return nil, err
	}
	return m, nil
}
