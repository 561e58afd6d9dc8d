// Package follow keeps a gateway's catalog file in step with the catalog
// the controller publishes (package kube/catalog), for `bridgehead run`
// with kubernetes.follow.
//
// Two client-go informers watch the catalog's namespace: one the base
// ConfigMap (by name), one the node slices of the gateway's own site
// (by label), so a gateway holds its own site's nodes and every site's
// aggregates, never the whole cluster. Any event wakes one goroutine
// (Follower.Run), which assembles the publication (catalog.Assemble),
// renders it as the catalog file's `sites:` YAML (with the gateway's
// `relay:` section when the base publishes its site's relay and lists
// the gateway: kube.RelayToConfig at the gateway's address), and, only
// when that differs from what the file holds, checks it with the gateway's config
// through the same checks as the reload path (Options.Validate) and
// writes it atomically (temporary file, fsync, rename, fsync of the
// directory). The daemon's file watch and Options.Changed then reload it
// all or nothing, as any change of the file.
//
// A publication in progress (catalog.ErrIncomplete), a malformed one or
// one the checks refuse is not written: the file keeps the last good
// catalog and the gateway keeps forwarding on it. Each is counted
// (bridgehead_follow_*) and logged when the follower's state changes,
// not on every event. While the API server is away the informers retry
// on their own (client-go's reflector backs off); the file, and so the
// gateway, is untouched, and a gateway restarted then starts from the
// file. When the API server is back the informers relist and the next
// evaluation writes whatever changed meanwhile.
//
// The reflector retries a refused watch without telling the informer's
// watch error handler, so the follower also watches its informers'
// requests (conn.go, in their ListerWatcher): each failed list or watch
// is counted by reason (bridgehead_follow_watch_errors_total),
// bridgehead_follow_connected says whether both informers reach the API
// server and bridgehead_follow_last_sync_timestamp_seconds when it last
// answered. The log has one line when they stop reaching it and one
// when they are back, never one per retry.
//
// The file is the gateway's source of truth: an operator can read it,
// `bridgehead check` it, and, with the follower stopped, edit it.
package follow
