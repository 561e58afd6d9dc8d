// Package daemon wires a gateway together from its config file: keys,
// TUN, UDP socket, router, kernel routes and the metrics endpoint. It is
// what `bridgehead run` runs; tests run it in network namespaces.
//
// Run is a list of start steps (start.go), each pushing the undo of what
// it acquires on one stack (undo.go) that Run unwinds once, after a
// failed step or at shutdown; serve.go runs the started gateway. A
// config takes one path in, at start and at every reload (validate.go):
// a file one refuses, the other refuses with the same error.
//
// Stopping drains (drain.go): the first SIGTERM or SIGINT (StopSignals,
// Options.Drain) turns /readyz to 503 and tells remote gateways to move
// this gateway's flows (router.SetDraining), and the gateway keeps
// forwarding until no data crossed it for drain.quiet or drain.timeout
// passed; a second signal, or cancelling Run's context, stops it at
// once.
package daemon
