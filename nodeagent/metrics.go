package nodeagent

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

// Stages of a sync, the label of the error series.
const (
	stageCatalog = "catalog"
	stageCNI     = "cni"
	stageRoutes  = "routes"
	stageSNAT    = "snat"
	// stageBridgeNF: br_netfilter and its sysctls (HostNet).
	stageBridgeNF = "bridge-netfilter"
	// stageForward: another table's forward chain drops pod traffic.
	stageForward = "forward"
	// stageState: the host state file (state.go): a newer agent's, so
	// nothing is changed.
	stageState = "state"
)

// stages in the order a sync runs them.
var stages = [...]string{stageState, stageCatalog, stageCNI, stageRoutes, stageSNAT, stageBridgeNF, stageForward}

// metrics are the agent's bridgehead_node_* series, registered on the
// registry the caller passes in. Only the agent's loop writes them.
type metrics struct {
	routesInstalled prometheus.Gauge
	routeChanges    *prometheus.CounterVec
	routeRepairs    prometheus.Counter
	repairSeconds   prometheus.Histogram
	cniWritten      prometheus.Gauge
	cniWrites       prometheus.Counter
	pluginsCopied   prometheus.Counter
	snatWrites      prometheus.Counter
	sysctlWrites    prometheus.Counter
	syncs           *prometheus.CounterVec
	errors          *prometheus.CounterVec
	lastError       *prometheus.GaugeVec
	lastErrorTime   prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		routesInstalled: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_node_routes_installed", Help: "Routes of the agent's protocol in the main table after the last sync.",
		}),
		routeChanges: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_node_route_changes_total", Help: "Routes the agent added, replaced or deleted.",
		}, []string{"op"}),
		routeRepairs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_node_route_repairs_total", Help: "Routes put back although the model had not changed (someone deleted or replaced them).",
		}),
		repairSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "bridgehead_node_route_repair_seconds", Help: "From the notification that one of the agent's routes went away to its repair.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
		}),
		cniWritten: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_node_cni_config_written", Help: "1 when the node's CNI config is in place for the current model.",
		}),
		cniWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_node_cni_config_writes_total", Help: "Times the CNI config file was (re)written.",
		}),
		pluginsCopied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_node_cni_plugins_installed_total", Help: "CNI plugin binaries copied into the CNI bin directory.",
		}),
		snatWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_node_snat_table_writes_total", Help: "Times the nftables table inet bridgehead-node was (re)written.",
		}),
		sysctlWrites: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "bridgehead_node_sysctl_writes_total", Help: "Sysctls the agent set (net.bridge.bridge-nf-call-iptables, -ip6tables).",
		}),
		syncs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_node_syncs_total", Help: "Syncs of the node with its model, by what started them.",
		}, []string{"trigger"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "bridgehead_node_errors_total", Help: "Failed steps, by stage (state, catalog, cni, routes, snat, bridge-netfilter, forward).",
		}, []string{"stage"}),
		lastError: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "bridgehead_node_last_error", Help: "1 when the last attempt of the stage failed, 0 when it succeeded.",
		}, []string{"stage"}),
		lastErrorTime: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "bridgehead_node_last_error_timestamp_seconds", Help: "Unix time of the last failed step (0: none yet).",
		}),
	}
	promreg.Zero(m.routeChanges, "add", "replace", "delete")
	promreg.Zero(m.errors, stages[:]...)
	promreg.Zero(m.lastError, stages[:]...)
	if err := promreg.Register(reg, m.routesInstalled, m.routeChanges, m.routeRepairs, m.repairSeconds,
		m.cniWritten, m.cniWrites, m.pluginsCopied, m.snatWrites, m.sysctlWrites, m.syncs, m.errors, m.lastError, m.lastErrorTime); err != nil {
		return nil, err
	}
	return m, nil
}
