// Package probestate holds the per-gateway state machines that the
// router's prober steps, each a value inside the router's liveness of
// one gateway:
//
//   - InFlight (inflight.go): the probes whose answers count, so that a
//     reply proves our packets reach the gateway only while it answers
//     a probe still in flight;
//   - PathMTU (pathmtu.go): the full-size probes that find a path MTU
//     black hole and the binary search for the path MTU;
//   - Damper (damping.go): the flap damping that decides when a gateway
//     that went down is up again.
//
// They read no clock and send nothing: the router passes monotonic
// nanoseconds in and sends the probes they ask for. Each type names the
// goroutine that may call each method (the router's handshake loop, its
// outside loop, or any). The package imports nothing of bridgehead's;
// package router owns the policy around them (probe intervals,
// ProbeMisses, the probe timeout) and the wire format.
package probestate
