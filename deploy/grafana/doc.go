// Package grafana holds the bridgehead Grafana dashboard (bridgehead.json,
// embedded as Dashboard) and the means to list the metrics its queries
// name. Its tests check them against the daemon's and the relay's
// registries; e2e's TestDashboardMetrics checks them against the
// /metrics of a running lab gateway.
package grafana
