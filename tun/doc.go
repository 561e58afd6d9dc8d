// Package tun holds the inside of the tunnel: the layer-3 devices that carry
// pod and node traffic between the kernel and the router.
//
// Backends: a Linux TUN opened through github.com/songgao/water (portable,
// one packet per system call), and an in-memory Channel device for tests.
package tun
