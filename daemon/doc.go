// Package daemon wires a gateway together from its config file: keys,
// TUN, UDP socket, router, kernel routes and the metrics endpoint. It is
// what `bridgehead run` runs; tests run it in network namespaces.
//
// Stopping drains (drain.go): the first SIGTERM or SIGINT (StopSignals,
// Options.Drain) turns /readyz to 503 and tells remote gateways to move
// this gateway's flows (router.SetDraining), and the gateway keeps
// forwarding until no data crossed it for drain.quiet or drain.timeout
// passed; a second signal, or cancelling Run's context, stops it at
// once.
package daemon
