package transit

import "github.com/prometheus/client_golang/prometheus"

// collector exports a Relay's Counts. Every series exists from the
// start, at zero.
type collector struct {
	c                *Counts
	datagrams, bytes *prometheus.Desc
	dropped          *prometheus.Desc
}

func newCollector(c *Counts) *collector {
	return &collector{
		c: c,
		datagrams: prometheus.NewDesc("bridgehead_transit_datagrams_total",
			"Relay messages forwarded by this gateway as a hub (direction forwarded), received through a hub and handed on (delivered), or kept by the relay path: hubs' hints and direct probes (control).",
			[]string{"direction"}, nil),
		bytes: prometheus.NewDesc("bridgehead_transit_bytes_total",
			"Bytes of relayed datagrams (relay header not counted), by direction as bridgehead_transit_datagrams_total.",
			[]string{"direction"}, nil),
		dropped: prometheus.NewDesc("bridgehead_transit_dropped_total",
			"Relay messages dropped, by reason.", []string{"reason"}, nil),
	}
}

func (m *collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- m.datagrams
	ch <- m.bytes
	ch <- m.dropped
}

func (m *collector) Collect(ch chan<- prometheus.Metric) {
	fwd, del := m.c.Bytes()
	for _, d := range []struct {
		r Reason
		b uint64
	}{{Forwarded, fwd}, {Delivered, del}} {
		ch <- prometheus.MustNewConstMetric(m.datagrams, prometheus.CounterValue, float64(m.c.Get(d.r)), d.r.String())
		ch <- prometheus.MustNewConstMetric(m.bytes, prometheus.CounterValue, float64(d.b), d.r.String())
	}
	ch <- prometheus.MustNewConstMetric(m.datagrams, prometheus.CounterValue, float64(m.c.Get(Control)), Control.String())
	for r := ReasonMalformed; r < numReasons; r++ {
		ch <- prometheus.MustNewConstMetric(m.dropped, prometheus.CounterValue, float64(m.c.Get(r)), r.String())
	}
}
