// Package container holds the script that writes bridgehead's container
// image (build.sh, run by `make container`) and the test that inspects
// what it writes. One image serves the controller, the node agent and
// in-cluster gateways; it is built with umoci, with no container engine,
// and is reproducible: the same commit gives the same image digest.
package container
