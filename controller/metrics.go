package controller

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/internal/promreg"
)

// metrics are the controller's Prometheus metrics (bridgehead_controller_*).
// Workers write them concurrently; the client library synchronises.
type metrics struct {
	leader       prometheus.Gauge
	unassigned   *prometheus.GaugeVec   // reason: no_site, ambiguous
	siteNodes    *prometheus.GaugeVec   // site
	siteBlocks   *prometheus.GaugeVec   // site, family, state (held, pending, free)
	allocations  *prometheus.CounterVec // result: allocated, adopted, exhausted
	problems     *prometheus.CounterVec // reason (ipam.Reason)
	reconciles   *prometheus.CounterVec // kind (node, site), result (ok, error)
	reconcileDur *prometheus.HistogramVec
	writes       *prometheus.CounterVec // object (node, node_status, site_status, configmap), result
	rebuildNodes prometheus.Gauge
	rebuildSecs  prometheus.Gauge
	firstPass    prometheus.Gauge       // seconds from the start of the lead to the first full reconcile
	doubleAllocs prometheus.Gauge       // pairs of Nodes recording overlapping blocks (the audit)
	conflicts    *prometheus.CounterVec // kind (node, site): writes refused because the object changed since it was read

	catalogPublishes    *prometheus.CounterVec // result: ok, error, invalid
	catalogWrites       *prometheus.CounterVec // op: create, update, delete
	catalogBytesWritten prometheus.Counter
	catalogBytes        *prometheus.GaugeVec // object: base, slices, indexes
	catalogObjects      prometheus.Gauge
	catalogNodes        prometheus.Gauge
	catalogLeftOut      *prometheus.GaugeVec // kind: site, node
	catalogRender       prometheus.Histogram
}

func newMetrics(reg prometheus.Registerer) *metrics {
	m := &metrics{
		leader: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_leader",
			Help: "1 while this replica holds the lease and runs the workers."}),
		unassigned: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bridgehead_controller_nodes_unassigned",
			Help: "Nodes with no site: their InternalIPs match no Site (no_site) or several (ambiguous)."}, []string{"reason"}),
		siteNodes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bridgehead_controller_site_nodes",
			Help: "Nodes assigned to the site."}, []string{"site"}),
		siteBlocks: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bridgehead_controller_site_blocks",
			Help: "Pod blocks of the site's pool by state: held by nodes, pending (release grace), free."}, []string{"site", "family", "state"}),
		allocations: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_allocations_total",
			Help: "Block allocations by result: allocated (new), adopted (a node's existing range), exhausted (no free block)."}, []string{"result"}),
		problems: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_pod_cidr_problems_total",
			Help: "Existing node pod CIDRs not adopted, by reason (OutOfPool, NotBlock, Conflict, ...)."}, []string{"reason"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_reconciles_total",
			Help: "Reconciles by kind (node, site, catalog, releases) and result (ok, error)."}, []string{"kind", "result"}),
		reconcileDur: prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "bridgehead_controller_reconcile_seconds",
			Help:    "Reconcile duration by kind, API writes included.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 4, 8)}, []string{"kind"}),
		writes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_api_writes_total",
			Help: "API writes by object (node, node_status, site_status, configmap) and result (ok, error)."}, []string{"object", "result"}),
		rebuildNodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_rebuild_nodes",
			Help: "Nodes listed at the last rebuild of the allocation state."}),
		rebuildSecs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_rebuild_seconds",
			Help: "Duration of the last rebuild (List of all Nodes included)."}),
		firstPass: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_first_reconcile_seconds",
			Help: "Seconds from the start of this replica's lead (rebuild included) until every Node it knew then was reconciled once: the failover's end."}),
		doubleAllocs: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_double_allocations",
			Help: "Pairs of Nodes whose recorded pod blocks overlap, found by the leader's periodic audit; should be 0."}),
		conflicts: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_write_conflicts_total",
			Help: "Writes the API server refused because the object (kind: node, site) changed since it was read; each is read again and decided again."}, []string{"kind"}),
		catalogPublishes: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_catalog_publishes_total",
			Help: "Catalog publications by result: ok, error (an API write failed; retried), invalid (the plan failed its checks; nothing written)."}, []string{"result"}),
		catalogWrites: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "bridgehead_controller_catalog_objects_written_total",
			Help: "Catalog ConfigMaps written, by op: create, update, delete (stale slices and indexes)."}, []string{"op"}),
		catalogBytesWritten: prometheus.NewCounter(prometheus.CounterOpts{Name: "bridgehead_controller_catalog_written_bytes_total",
			Help: "Data bytes of the catalog ConfigMaps created or updated."}),
		catalogBytes: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bridgehead_controller_catalog_bytes",
			Help: "Data bytes of the last published catalog: the base, all node slices together, all site indexes together."}, []string{"object"}),
		catalogObjects: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_catalog_objects",
			Help: "ConfigMaps of the last published catalog (the base, the node slices and the site indexes)."}),
		catalogNodes: prometheus.NewGauge(prometheus.GaugeOpts{Name: "bridgehead_controller_catalog_nodes",
			Help: "Nodes in the last published catalog."}),
		catalogLeftOut: prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "bridgehead_controller_catalog_left_out",
			Help: "Sites and Nodes the last catalog plan left out because they fail its checks."}, []string{"kind"}),
		catalogRender: prometheus.NewHistogram(prometheus.HistogramOpts{Name: "bridgehead_controller_catalog_render_seconds",
			Help:    "Time to build, check and render the catalog from the caches (API writes excluded).",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 8)}),
	}
	reg.MustRegister(m.catalogPublishes, m.catalogWrites, m.catalogBytesWritten, m.catalogBytes, m.catalogObjects, m.catalogNodes, m.catalogLeftOut, m.catalogRender)
	promreg.Zero(m.catalogPublishes, "ok", "error", "invalid")
	promreg.Zero(m.catalogWrites, "create", "update", "delete")
	reg.MustRegister(m.leader, m.unassigned, m.siteNodes, m.siteBlocks, m.allocations, m.problems,
		m.reconciles, m.reconcileDur, m.writes, m.rebuildNodes, m.rebuildSecs, m.firstPass, m.doubleAllocs, m.conflicts)
	promreg.Zero(m.unassigned, "no_site", "ambiguous")
	promreg.Zero(m.allocations, "allocated", "adopted", "exhausted")
	for _, k := range []string{"node", "site", "catalog", "releases"} {
		for _, r := range []string{"ok", "error"} {
			m.reconciles.WithLabelValues(k, r)
		}
	}
	return m
}
