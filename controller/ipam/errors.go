package ipam

import (
	"errors"
	"fmt"
	"net/netip"
)

// ErrExhausted matches (errors.Is) the error of an Allocate that found no
// free block in a family's pool.
var ErrExhausted = errors.New("pod CIDR pool exhausted")

// ErrUnknownSite matches the error of a call naming a site that was never
// set (or was removed).
var ErrUnknownSite = errors.New("unknown site")

// ExhaustedError says which site and family ran out.
type ExhaustedError struct {
	Site   string
	Family Family
}

func (e *ExhaustedError) Error() string {
	return fmt.Sprintf("site %s: %s pod CIDR pool exhausted", e.Site, e.Family)
}

// Is makes errors.Is(err, ErrExhausted) true.
func (e *ExhaustedError) Is(target error) bool { return target == ErrExhausted }

// OtherSiteError is returned when a node already holds blocks of another
// site; the caller releases them first if the node really moved.
type OtherSiteError struct {
	Node, Site, Holding string
}

func (e *OtherSiteError) Error() string {
	return fmt.Sprintf("node %s: holds blocks of site %s, not %s", e.Node, e.Holding, e.Site)
}

// Reason says why a CIDR was not adopted.
type Reason string

// Reasons of a Problem.
const (
	// OutOfPool: the CIDR does not overlap the site's pod CIDRs of its family.
	OutOfPool Reason = "OutOfPool"
	// NotBlock: the CIDR overlaps the pool but is not exactly one block
	// (another size, or not aligned).
	NotBlock Reason = "NotBlock"
	// BeyondLimit: the CIDR is a block of a pod CIDR wider than 2^20 blocks,
	// beyond the first 2^20 that the allocator uses.
	BeyondLimit Reason = "BeyondLimit"
	// NoFamily: the site has no pod CIDR of the CIDR's family.
	NoFamily Reason = "NoFamily"
	// Conflict: the block is held by another node (Problem.Other), or is in
	// the release grace of another node.
	Conflict Reason = "Conflict"
	// SecondOfFamily: the node listed two CIDRs of one family; only the first counts.
	SecondOfFamily Reason = "SecondOfFamily"
	// Mismatch: the node already holds a different block of that family.
	Mismatch Reason = "Mismatch"
	// UnknownSite: Rebuild got an entry for a site that is not set.
	UnknownSite Reason = "UnknownSite"
	// WrongSite: Rebuild got an entry for a node that holds blocks of another site.
	WrongSite Reason = "WrongSite"
)

// Problem is a CIDR that Adopt or Rebuild did not take.
type Problem struct {
	Node   string
	Site   string
	CIDR   netip.Prefix
	Reason Reason
	// Other is the node that holds the block, for Conflict.
	Other string
}

func (p Problem) String() string {
	s := fmt.Sprintf("node %s: pod CIDR %s: %s in site %s", p.Node, p.CIDR, p.Reason, p.Site)
	if p.Other != "" {
		s += " (held by node " + p.Other + ")"
	}
	return s
}
