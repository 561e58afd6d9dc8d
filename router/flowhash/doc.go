// Package flowhash gives every packet of a flow the same hash, fragments
// included, so that the router's site.pick sends a flow through one
// gateway of its site.
//
// Whole packets and first fragments hash by their 5-tuple
// (packet.FlowHashFragment). A later fragment carries no ports: it gets
// the hash its datagram's first fragment got, looked up by the
// datagram's key (addresses, protocol, identification) in a small
// direct-mapped Table, and falls back to the 3-tuple hash when the first
// fragment was not seen (it came later, or its slot was taken since).
// The alternative, hashing every packet of a fragmenting protocol by
// addresses alone, would put all UDP between two hosts (every VXLAN
// tunnel between two nodes) on one gateway.
//
// It imports only package packet; package router owns the Hasher and
// gives each inside lane a Table.
package flowhash
