// Package bridgehead is the package map of bridgehead, a userspace
// virtual router for multi-site Kubernetes clusters. It holds no code:
// this comment says which package owns which part of the pipeline, and
// which way the imports run.
//
// # The data path
//
// A packet from a pod at site A to a pod at site B crosses these
// packages in this order:
//
//  1. tun: the gateway's layer-3 TUN device hands the router the plain
//     packet (in batches, from one queue per lane).
//  2. router, inside loop (router/inside.go, insidefq.go): router/lpm
//     finds the destination site, router/flowhash the flow's hash,
//     site.pick one of the site's gateways that is up; router/fq queues
//     the packet fairly per flow, or router/sparse sends a sparse flow
//     on the express lane at once; a peer without a session yet holds
//     it in its router/setupqueue.
//  3. crypto: seals the packet in place for the chosen gateway's Noise
//     session (crypto also runs the handshakes the router drives).
//  4. udp: sends runs of sealed datagrams in one call.
//  5. udp at the remote gateway: receives them in batches (earlydrop's
//     kernel filter has dropped what cannot be ours before the socket).
//  6. router, outside loop (router/outside.go): finds the session by
//     receiver index, opens the datagram (crypto), checks the replay
//     window and that the inner source belongs to the sending gateway's
//     site, answers probes (router/probestate keeps each gateway's
//     probes in flight, path MTU search and flap damping).
//  7. tun: the packet is written to the remote gateway's TUN, and the
//     kernel delivers it to the node or pod.
//
// packet parses and rewrites inner packets for all of them (flow hash,
// MSS clamp, ICMP errors); transit carries a spoke's traffic through a
// hub that never decrypts it; steer is the kernel's flow sorter on the
// TUN; health and control read the router's state for /readyz and
// `bridgehead status`; relay is the HTTP CONNECT relay for API-server
// callbacks; mesh summarizes the paths between sites.
//
// # The control plane
//
// config loads and checks the cluster's sites, gateways and this
// gateway's identity (noderoutes renders the nodes' routes from it);
// kube translates between config and the Kubernetes resources
// (kube/apis/v1alpha1), and kube/follow, kube/register and
// kube/meshstatus keep them in step; controller assigns Nodes to Sites
// and pod blocks (controller/ipam, controller/azureroutes); nodeagent
// gives every node its pod network and routes; daemon wires a gateway
// together from its config (keys, TUN, UDP, router, kernel routes via
// netsetup, metrics, reloads, sdnotify); verify checks a running gateway
// from outside; cmd/bridgehead is the one binary's commands. bench, e2e
// and deploy sit on top: benchmarks, end-to-end tests, packaging.
//
// # Which way the imports run
//
// Bottom to top; a package may import its own layer and those below it,
// never one above:
//
//	base          packet, ratelimit, steer, mesh, sdnotify, netsetup,
//	              internal/*, kube/apis/*, controller/ipam
//	router parts  router/lpm, router/fq, router/flowhash, router/sparse,
//	              router/probestate, router/setupqueue (never router)
//	crypto, sockets  crypto, udp, tun, relay
//	transport     transit, earlydrop
//	router        router
//	readers       health, control
//	config        config, noderoutes
//	kubernetes    kube/*, controller/*, nodeagent/*
//	daemon        daemon
//	verify        verify/*
//	commands      cmd/*
//	top           bench/*, e2e, deploy/*, internal/docgen
//
// So the data path never imports the control plane: the router knows
// nothing of config files or Kubernetes (the daemon translates config
// into router.Config), and tun and udp know nothing of the router. The
// table in internal/layering's test is this map; the test reads the real
// import graph with `go list` and fails, naming both packages, on any
// import that runs up and on any package missing from the table.
package bridgehead
