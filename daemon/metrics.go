package daemon

import (
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/udp"
)

// metrics are the daemon's own series; the router's come from its
// Collector. Everything lives on one registry owned by the daemon.
type metrics struct {
	reg        *prometheus.Registry
	reloads    *prometheus.CounterVec
	lastReload prometheus.Gauge
	configInfo *prometheus.GaugeVec
	readyGauge prometheus.Gauge
	siteReady  *prometheus.GaugeVec
	// sitesShown are the sites that have a bridgehead_site_up series;
	// written by updateReadiness only (the ops loop).
	sitesShown map[string]bool
}

// newMetrics builds the registry of a gateway around r and its sockets.
func newMetrics(r *router.Router, version string, socks ...sendFailureCounter) *metrics {
	return newMetricsOn(prometheus.NewRegistry(), r, version, socks...)
}

// newMetricsOn is newMetrics on reg, a registry made before the router
// (the catalog follower's metrics are on it from the start).
func newMetricsOn(reg *prometheus.Registry, r *router.Router, version string, socks ...sendFailureCounter) *metrics {
	m := &metrics{
		reg: reg,
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_config_reloads_total", Help: "Config reloads by result (success, error).",
		}, []string{"result"}),
		lastReload: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_config_last_reload_success_timestamp_seconds", Help: "Unix time the running config was loaded.",
		}),
		configInfo: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bridgehead_config_info", Help: "The running config: file and hash of its bytes.",
		}, []string{"path", "hash"}),
		readyGauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_ready", Help: "1 while this gateway is ready, what /readyz reports: it reaches at least one remote site (or there is none), can deliver to its own site, and is not draining.",
		}),
		siteReady: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bridgehead_site_up", Help: "1 while at least one gateway of the remote site is up (it answered our probes within three probe intervals) or draining.",
		}, []string{"site"}),
	}
	m.reloads.WithLabelValues("success")
	m.reloads.WithLabelValues("error")
	bi := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "bridgehead_build_info", Help: "Build of the running bridgehead.",
	}, []string{"version", "goversion"})
	bi.WithLabelValues(version, strings.TrimPrefix(runtime.Version(), "go")).Set(1)
	m.reg.MustRegister(
		router.NewCollector(r), router.NewSitePolicyCollector(r), bi, newSendFailureCollector(socks),
		m.reloads, m.lastReload, m.configInfo, m.readyGauge, m.siteReady,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	return m
}

// MetricNames lists the names of every bridgehead_* metric family a
// gateway exports, for tests of dashboards and alerts. It builds a
// registry around r.
func MetricNames(r *router.Router) ([]string, error) {
	m := newMetrics(r, "test")
	m.reg.MustRegister(newMeshCollector(meshRowsOf(r, "a", "gw-a1")))
	m.configInfo.WithLabelValues("x", "y").Set(1)
	m.siteReady.WithLabelValues("s").Set(1)
	mfs, err := m.reg.Gather()
	if err != nil {
		return nil, err
	}
	var names []string
	for _, mf := range mfs {
		if strings.HasPrefix(mf.GetName(), "bridgehead_") {
			names = append(names, mf.GetName())
		}
	}
	return names, nil
}

// sendFailureCounter is a socket that counts the datagrams the kernel
// refused to send, by reason (udp.LinuxBind).
type sendFailureCounter interface {
	SendFailures(udp.SendReason) uint64
}

// sendFailureCollector exports the refusals of a gateway's sockets (its
// lanes' and its express socket), summed per reason, every reason from
// zero. A refusal costs the refused destination's datagrams only: the
// others of the batch still go out.
type sendFailureCollector struct {
	socks []sendFailureCounter
	desc  *prometheus.Desc
}

func newSendFailureCollector(socks []sendFailureCounter) *sendFailureCollector {
	return &sendFailureCollector{socks: socks, desc: prometheus.NewDesc("bridgehead_udp_send_failures_total",
		sendFailuresHelp, []string{"reason"}, nil)}
}

const sendFailuresHelp = "Datagrams the kernel refused to send on the gateway's UDP sockets, by reason: unreachable (no route, or an unreachable one), prohibited (a prohibit route or a firewall rule), invalid (a blackhole route, among others), too_big, no_buffers, other. A refusal costs its own destination's datagrams; those to other gateways still go out."

// Describe implements prometheus.Collector.
func (c *sendFailureCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

// Collect implements prometheus.Collector.
func (c *sendFailureCollector) Collect(ch chan<- prometheus.Metric) {
	for r := range udp.NumSendReasons {
		var n uint64
		for _, s := range c.socks {
			n += s.SendFailures(r)
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.CounterValue, float64(n), r.String())
	}
}
