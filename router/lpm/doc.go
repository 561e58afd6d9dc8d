// Package lpm is a longest-prefix-match table for IPv4 and IPv6 routes.
//
// A Table is a multibit trie with a stride of eight bits: every node covers
// one octet of the address and keeps the prefixes that end inside that octet
// in a compact, bitmap-indexed array (the complete-binary-tree numbering of
// the allotment routing table), plus a popcount-compressed array of children.
// A child slot holds either a deeper node or, while it is the only route
// below that slot, a single path-compressed leaf. Lookups walk at most four
// (IPv4) or sixteen (IPv6) nodes, never allocate, and touch memory only
// proportional to the depth reached.
//
// Concurrency: a Table is built by one goroutine with Insert and then
// shared read-only. Lookup, LookupPrefix, Len and All may run from any
// number of goroutines at once provided no Insert runs concurrently. The
// router builds a fresh Table for each configuration and publishes it with
// an atomic pointer swap instead of mutating a live one.
package lpm
