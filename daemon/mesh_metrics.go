package daemon

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/mesh"
	"github.com/bridgehead/bridgehead/router"
)

// meshCollector exports the gateway's mesh rows, one series per remote
// site (never per remote gateway), labelled with this gateway's own site
// and name so that Prometheus can draw the sites-by-sites matrix from
// every gateway's scrape (Grafana's "Mesh" panel groups them by
// local_site and site). Values are read from the tracker at scrape time.
type meshCollector struct {
	rows               func() []mesh.Row
	state, rtt, loss   *prometheus.Desc
	mtu, gatewaysUp    *prometheus.Desc
	stateValue         map[mesh.State]float64
	site, gatewayLabel string
}

// Values of bridgehead_mesh_site_state.
const (
	meshStateUp         = 1
	meshStateDegraded   = 0.5
	meshStateDown       = 0
	meshStateConnecting = -1
)

func newMeshCollector(rows func() []mesh.Row) *meshCollector {
	l := []string{"local_site", "local_gateway", "site"}
	return &meshCollector{
		rows: rows,
		state: prometheus.NewDesc("bridgehead_mesh_site_state",
			"How this gateway reaches a remote site, as its /mesh page shows it: 1 up (every gateway of the site answers), 0.5 degraded (some do: a standby gateway carries the flows, or a path carries small packets only), 0 down (none answers, or none for two probe intervals), -1 connecting.", l, nil),
		rtt: prometheus.NewDesc("bridgehead_mesh_site_rtt_seconds",
			"Median probe round trip to a remote site's gateways over the last 30 s (0: none answered).", l, nil),
		loss: prometheus.NewDesc("bridgehead_mesh_site_probe_loss_ratio",
			"Share of probes to a remote site's gateways (those up, or all while none is) unanswered over the last 30 s.", l, nil),
		mtu: prometheus.NewDesc("bridgehead_mesh_site_path_mtu_bytes",
			"Largest inner packet every up gateway's path to a remote site carries (0: not checked yet).", l, nil),
		gatewaysUp: prometheus.NewDesc("bridgehead_mesh_site_gateways_up",
			"Gateways of a remote site that answer this gateway's probes.", l, nil),
		stateValue: map[mesh.State]float64{mesh.Up: meshStateUp, mesh.Degraded: meshStateDegraded,
			mesh.Down: meshStateDown, mesh.Silent: meshStateDown, mesh.Connecting: meshStateConnecting},
	}
}

// Describe implements prometheus.Collector.
func (c *meshCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.state, c.rtt, c.loss, c.mtu, c.gatewaysUp} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *meshCollector) Collect(ch chan<- prometheus.Metric) {
	for _, r := range c.rows() {
		l := []string{r.FromSite, r.FromGateway, r.To}
		ch <- prometheus.MustNewConstMetric(c.state, prometheus.GaugeValue, c.stateValue[r.State], l...)
		ch <- prometheus.MustNewConstMetric(c.rtt, prometheus.GaugeValue, r.RTTMs/1000, l...)
		ch <- prometheus.MustNewConstMetric(c.loss, prometheus.GaugeValue, r.Loss, l...)
		ch <- prometheus.MustNewConstMetric(c.mtu, prometheus.GaugeValue, float64(r.MTU), l...)
		ch <- prometheus.MustNewConstMetric(c.gatewaysUp, prometheus.GaugeValue, float64(r.GatewaysUp), l...)
	}
}

// meshRowsOf is the live rows of r's remote gateways, for a registry
// built around a bare router (MetricNames): no tracker history.
func meshRowsOf(r *router.Router, site, gateway string) func() []mesh.Row {
	t := mesh.NewTracker(mesh.TrackerOptions{Site: site, Gateway: gateway})
	return func() []mesh.Row { return t.Rows(meshPeers(health.PeerStates(r.Peers())), time.Now()) }
}
