// Package meshstatus puts a gateway's mesh rows (package mesh) into its
// Gateway's status.mesh and reads every Gateway's rows back, for the
// cluster-wide matrix of `bridgehead status --mesh --kubernetes`, the
// kubectl plugin and a gateway's /mesh page.
//
// # Writes
//
// A Publisher writes one row per remote site, never per remote gateway,
// with server-side apply on the status subresource under its own field
// manager (FieldManager), so kube/register's fields (key, endpoint,
// Ready) and the controller's conditions are left alone. It writes when
// a row's state or path changed (at most once every MinGap, so a site
// that goes down is one write per gateway, however many of its gateways
// go), and otherwise, when RTT, loss or MTU moved, at most once every
// Refresh. Rows that only show red for a moment (silent, not yet down
// in the router) are published as the router has them: a single lost
// probe costs no write.
//
// Cost at 200 sites of 3 gateways (600 gateways, 199 rows each; the
// body size is measured by TestApplyBodySize): steady, one write per
// gateway per Refresh (60 s), 10 writes a second cluster-wide of about
// 34 KB each, some 340 KB/s into the API server and to each watcher of
// Gateways. A site going down changes one row on each of the other 597
// gateways: 597 writes, spread over MinGap (5 s) at worst. Everything
// flapping at once is bounded by 600/MinGap = 120 writes a second.
//
// # Reads
//
// List reads every Gateway (one list call) and turns their rows into
// mesh rows: FromSite is the Gateway's spec.site, Measured its
// observedAt, so the matrix's AGE says how stale a published row is.
//
// Concurrency: a Publisher's Step is called from one goroutine; List is
// safe from any.
package meshstatus
