// Package daemon wires a gateway together from its config file: keys,
// TUN, UDP socket, router, kernel routes and the metrics endpoint. It is
// what `bridgehead run` runs; tests run it in network namespaces.
package daemon
