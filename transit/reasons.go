package transit

import "sync/atomic"

// Reason is what became of a relay message: Forwarded, Delivered, or why
// it was dropped.
type Reason uint8

// Outcomes. Their String values are the `reason` label of
// bridgehead_transit_dropped_total and must stay stable.
const (
	Forwarded            Reason = iota // hub: sent on to the destination
	Delivered                          // spoke: inner datagram handed to the router
	Control                            // spoke: a hub's hint or a direct probe (direct.go), for the relay path itself
	ReasonMalformed                    // not a relay message (size, type, reserved bytes)
	ReasonUnknownIndex                 // no session has the receiver index
	ReasonBadTag                       // authentication failed
	ReasonReplay                       // counter already seen or too old
	ReasonUnknownGateway               // the KeyID is no gateway of the catalog
	ReasonNotAllowed                   // the hub may not relay between these gateways
	ReasonNoSession                    // hub: no session with the destination
	ReasonSealFailed                   // hub: the destination session's counter is used up
	ReasonOriginMismatch               // spoke: the inner session's gateway is not the one the hub named
	ReasonHintRefused                  // spoke: a hint or direct probe naming an address it may not take (direct.go, hintAllowed)
	numReasons
)

var reasonNames = [numReasons]string{
	Forwarded:            "forwarded",
	Delivered:            "delivered",
	Control:              "control",
	ReasonMalformed:      "malformed",
	ReasonUnknownIndex:   "unknown_index",
	ReasonBadTag:         "bad_tag",
	ReasonReplay:         "replay",
	ReasonUnknownGateway: "unknown_gateway",
	ReasonNotAllowed:     "not_allowed",
	ReasonNoSession:      "no_session",
	ReasonSealFailed:     "seal_failed",
	ReasonOriginMismatch: "origin_mismatch",
	ReasonHintRefused:    "hint_refused",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Dropped reports whether r is a drop.
func (r Reason) Dropped() bool { return r > Control }

// Counts counts outcomes and relayed bytes. Safe for concurrent use; the
// zero value is ready.
type Counts struct {
	n     [numReasons]atomic.Uint64
	bytes [2]atomic.Uint64 // forwarded, delivered
}

func (c *Counts) add(r Reason, size int) {
	c.n[r].Add(1)
	if r <= Delivered {
		c.bytes[r].Add(uint64(size))
	}
}

// Get returns how many relay messages had outcome r.
func (c *Counts) Get(r Reason) uint64 {
	if r >= numReasons {
		return 0
	}
	return c.n[r].Load()
}

// Bytes returns the relayed datagram bytes forwarded (hub) and delivered
// (spoke), relay headers not counted.
func (c *Counts) Bytes() (forwarded, delivered uint64) {
	return c.bytes[Forwarded].Load(), c.bytes[Delivered].Load()
}
