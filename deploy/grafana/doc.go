// Package grafana holds the bridgehead Grafana dashboard (bridgehead.json)
// and a test that every metric it queries is one the daemon exports.
package grafana
