// Package udp holds the outside of the tunnel: sockets that carry encrypted
// datagrams between gateways, with batched receive and send.
//
// Backends: LinuxBind, a UDP socket driven with recvmmsg/sendmmsg (one
// system call per batch, IPv4 or dual-stack IPv6) that also uses UDP
// segmentation (GSO) to send runs of equal-sized datagrams as one message
// (Send for one destination, SendMany for runs to one destination among
// several) and receive coalescing (GRO) where the kernel has them, and
// that sends past a destination the kernel refuses (SendManyEach says
// which datagrams it refused, SendFailures counts them), and MemoryBind,
// an in-memory connected pair for router unit tests. ListenLanes opens
// several LinuxBinds on one port with SO_REUSEPORT, one per router lane;
// the kernel spreads datagrams over them by source address and port.
package udp
