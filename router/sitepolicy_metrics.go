package router

import "github.com/prometheus/client_golang/prometheus"

// SitePolicyCollector exports the site source allow-lists' drops
// (sitepolicy.go) as bridgehead_site_policy_drops_total{direction,site}.
// A series exists for each remote site and direction where a list
// applies in the config in force, or whose count is not zero: its
// cardinality is bounded by the configured sites. Collect reads atomics
// of the published state; it is safe beside the data path.
type SitePolicyCollector struct {
	r     *Router
	drops *prometheus.Desc
}

// NewSitePolicyCollector returns the collector for r; register it on the
// gateway's registry.
func NewSitePolicyCollector(r *Router) *SitePolicyCollector {
	return &SitePolicyCollector{r: r, drops: prometheus.NewDesc("bridgehead_site_policy_drops_total",
		"Packets the site source allow-lists (a Site's allowedSources) refused: direction=inside, from this site's pods to the remote site, which does not list this one (dropped before sealing); outside, from the remote site's pods, which this site does not list (dropped after opening, before delivery). The same drops are reason site_policy of bridgehead_dropped_packets_total.",
		[]string{"direction", "site"}, nil)}
}

// Describe implements prometheus.Collector.
func (c *SitePolicyCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.drops }

// Collect implements prometheus.Collector.
func (c *SitePolicyCollector) Collect(ch chan<- prometheus.Metric) {
	for _, d := range c.r.SitePolicyDrops() {
		if d.RefusesLocal || d.Inside > 0 {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(d.Inside), Inside.String(), d.Site)
		}
		if d.Refused || d.Outside > 0 {
			ch <- prometheus.MustNewConstMetric(c.drops, prometheus.CounterValue, float64(d.Outside), Outside.String(), d.Site)
		}
	}
}
