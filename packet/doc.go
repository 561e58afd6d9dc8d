// Package packet reads and rewrites the inner IP packets that travel
// through the tunnel, by hand and without allocating: header validation and
// address extraction (Parse, Destination), TCP MSS clamping (ClampMSS),
// ICMP "fragmentation needed" / "packet too big" generation (ICMPTooBig),
// and the Internet checksum helpers they share.
//
// Every function works on caller-owned byte slices, never retains them,
// never panics on malformed input and never allocates, so they are safe to
// call from the per-packet hot path. The package has no state: concurrent
// calls are safe as long as goroutines do not write the same bytes at the
// same time (ClampMSS and ICMPTooBig write into their argument buffers).
//
// It sits below every package that touches packets (tun's TCP merge, the
// router's inside and outside paths, the benchmark harness) and imports
// none of them, so that the imports run one way: down to packet.
package packet
