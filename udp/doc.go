// Package udp holds the outside of the tunnel: sockets that carry encrypted
// datagrams between gateways, with batched receive and send.
package udp
