package netpol

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/netip"
	"strings"
)

// TableName is the table the policy rules live in (family inet), beside
// the agent's "inet bridgehead-node".
const TableName = "bridgehead-netpol"

// encoding names the way Table encodes a Ruleset: bump it when that
// changes, so that a new agent rewrites a table an older one wrote from
// the same policies.
const encoding = "v2"

// Fingerprint identifies a ruleset's content: Table keeps it in the base
// chain's first rule's comment.
func Fingerprint(rs *Ruleset) string {
	sum := sha256.Sum256([]byte(encoding + "\n" + rs.String()))
	return "bridgehead netpol " + hex.EncodeToString(sum[:8])
}

// Direction is the side of a connection a policy guards.
type Direction int

// Directions.
const (
	Ingress Direction = iota
	Egress
)

func (d Direction) String() string {
	if d == Egress {
		return "egress"
	}
	return "ingress"
}

// Verdict ends a rule.
type Verdict int

// Verdicts. Return is an egress allow: the packet goes on to the
// ingress check of the base chain.
const (
	Accept Verdict = iota
	Return
	Drop
)

func (v Verdict) String() string {
	switch v {
	case Return:
		return "return"
	case Drop:
		return "drop"
	}
	return "accept"
}

// Ruleset is a compiled policy set: what Table writes into the table
// "inet bridgehead-netpol". It holds no Kubernetes types.
type Ruleset struct {
	// Sets are the named sets, sorted by name. Their names are their
	// contents' hashes: rules with the same peers share one set.
	Sets []Set
	// Dispatch maps a local pod's address to its chain, per direction:
	// ingress by destination, egress by source address (the verdict
	// maps ingress4, ingress6, egress4, egress6).
	Dispatch []Dispatch
	// Chains are the pods' chains, sorted by name: one per direction and
	// distinct list of policies that select a local pod.
	Chains []Chain
	// Self are the addresses of the local pods in Dispatch: a packet
	// from one of them to itself (a pod reaching its own Service, which
	// kube-proxy sends back to it) is accepted whatever the policies,
	// as the NetworkPolicy API leaves a pod's traffic to itself alone
	// (sets self4 and self6 of saddr . daddr).
	Self []netip.Addr
	// Counters are the named counters the rules count in, sorted by
	// name: one per policy and direction for its allow rules, one per
	// chain for its drop.
	Counters []Counter
	Stats    Stats
}

// Counter is a named counter object of the table: the packets one
// policy allowed in one direction, or the packets a chain dropped (its
// pods are isolated by Policies and none allowed the packet).
type Counter struct {
	Name     string
	Dir      Direction
	Verdict  Verdict // Accept (allowed; egress allows return) or Drop
	Policies []string
}

// Stats counts what a Ruleset holds.
type Stats struct {
	Policies      int // policies in the API
	LocalPolicies int // policies that select a pod of this node
	Invalid       int // policies left out (a selector that does not parse)
	Pods          int // pods with addresses, cluster-wide
	LocalPods     int // pods of this node selected by a policy
	Chains        int
	Rules         int // rules of the pods' chains
	Sets          int
	Elements      int // elements of the named sets (an interval counts one)
	Dispatch      int // elements of the verdict maps
}

// SetKind says what a set's elements are.
type SetKind int

// Set kinds.
const (
	// SetAddrs: address intervals (peers), looked up by saddr (ingress)
	// or daddr (egress).
	SetAddrs SetKind = iota
	// SetAddrPorts: address . protocol . port, looked up by
	// "ip daddr . meta l4proto . th dport": named ports resolved per pod.
	SetAddrPorts
)

// Set is a named set of one address family.
type Set struct {
	Name      string
	Family    int // 4 or 6
	Kind      SetKind
	Ranges    []AddrRange // SetAddrs: sorted, disjoint, not adjacent
	AddrPorts []AddrPort  // SetAddrPorts: sorted, unique
}

// AddrRange is the addresses First..Last.
type AddrRange struct{ First, Last netip.Addr }

// AddrPort is one element of a SetAddrPorts set.
type AddrPort struct {
	Addr  netip.Addr
	Proto uint8
	Port  uint16
}

// Dispatch is one element of a verdict map: packets of Addr (to it:
// ingress, from it: egress) jump to Chain.
type Dispatch struct {
	Dir   Direction
	Addr  netip.Addr
	Chain string
}

// Chain is a pod chain: the allow rules of every policy that selects
// its pods in its direction, in policy order, then a drop (the pods are
// isolated).
type Chain struct {
	Name     string
	Dir      Direction
	Policies []string // namespace/name, sorted
	Rules    []Rule   // the last is the drop
}

// Rule matches every one of its non-zero fields and then ends with
// Verdict.
type Rule struct {
	Family int // 0: both, 4 or 6
	// Peers is a SetAddrs set matched against the peer's address
	// (saddr for ingress, daddr for egress).
	Peers  string
	Dir    Direction
	Proto  uint8  // IPPROTO_*; 0 any
	PortLo uint16 // with Proto: destination port range; 0 any
	PortHi uint16
	// Named is a SetAddrPorts set matched against
	// daddr . l4proto . dport.
	Named string
	// Counter names the counter object the rule counts its packets in
	// (Ruleset.Counters).
	Counter string
	Verdict Verdict
	// Policy is the policy the rule comes from ("" for the drop).
	Policy string
}

// Protocol numbers.
const (
	protoTCP  = 6
	protoUDP  = 17
	protoSCTP = 132
)

func protoName(p uint8) string {
	switch p {
	case protoTCP:
		return "tcp"
	case protoUDP:
		return "udp"
	case protoSCTP:
		return "sctp"
	}
	return fmt.Sprint(p)
}

func ipKw(family int) string {
	if family == 6 {
		return "ip6"
	}
	return "ip"
}

// String renders the rule in nft syntax.
func (r Rule) String() string {
	var b []string
	if r.Family != 0 && r.Peers == "" && r.Named == "" {
		b = append(b, fmt.Sprintf("meta nfproto ipv%d", r.Family))
	}
	if r.Peers != "" {
		side := "saddr"
		if r.Dir == Egress {
			side = "daddr"
		}
		b = append(b, fmt.Sprintf("%s %s @%s", ipKw(r.Family), side, r.Peers))
	}
	if r.Proto != 0 {
		b = append(b, "meta l4proto "+protoName(r.Proto))
		switch {
		case r.PortLo == 0:
		case r.PortLo == r.PortHi:
			b = append(b, fmt.Sprintf("th dport %d", r.PortLo))
		default:
			b = append(b, fmt.Sprintf("th dport %d-%d", r.PortLo, r.PortHi))
		}
	}
	if r.Named != "" {
		b = append(b, fmt.Sprintf("%s daddr . meta l4proto . th dport @%s", ipKw(r.Family), r.Named))
	}
	if r.Counter != "" {
		b = append(b, fmt.Sprintf("counter name %q", r.Counter))
	}
	b = append(b, r.Verdict.String())
	return strings.Join(b, " ")
}

// String renders the set's elements in nft syntax.
func (s Set) String() string {
	var els []string
	for _, r := range s.Ranges {
		if r.First == r.Last {
			els = append(els, r.First.String())
		} else {
			els = append(els, r.First.String()+"-"+r.Last.String())
		}
	}
	for _, e := range s.AddrPorts {
		els = append(els, fmt.Sprintf("%s . %s . %d", e.Addr, protoName(e.Proto), e.Port))
	}
	return fmt.Sprintf("%s { %s }", s.Name, strings.Join(els, ", "))
}

// String renders the whole ruleset, one line a set, chain rule or map
// element: the form the tests compare and the fingerprint hashes.
func (rs *Ruleset) String() string {
	var b strings.Builder
	for _, s := range rs.Sets {
		fmt.Fprintf(&b, "set %s\n", s)
	}
	for _, d := range rs.Dispatch {
		side := "daddr"
		if d.Dir == Egress {
			side = "saddr"
		}
		fam := 4
		if d.Addr.Is6() {
			fam = 6
		}
		fmt.Fprintf(&b, "map %s%d %s %s : jump %s\n", d.Dir, fam, side, d.Addr, d.Chain)
	}
	for _, a := range rs.Self {
		fmt.Fprintf(&b, "self %s\n", a)
	}
	for _, c := range rs.Counters {
		fmt.Fprintf(&b, "counter %s # %s %s %s\n", c.Name, c.Dir, c.Verdict, strings.Join(c.Policies, ","))
	}
	for _, c := range rs.Chains {
		fmt.Fprintf(&b, "chain %s # %s %s\n", c.Name, c.Dir, strings.Join(c.Policies, ","))
		for _, r := range c.Rules {
			fmt.Fprintf(&b, "  %s\n", r)
		}
	}
	return b.String()
}
