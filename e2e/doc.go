// Package e2e holds the end-to-end tests: real bridgehead processes, real
// TUN devices and UDP sockets, in network namespaces built by
// deploy/lab/lab.sh, the same topology as `make demo`. They need root and
// run in CI; elsewhere they skip.
package e2e
