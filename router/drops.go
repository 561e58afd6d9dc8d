package router

import "sync/atomic"

// Direction says which loop dropped a packet.
type Direction uint8

const (
	// Inside is the TUN to UDP direction (plain packets leaving the site).
	Inside Direction = iota
	// Outside is the UDP to TUN direction (datagrams from peers).
	Outside
	numDirections
)

func (d Direction) String() string {
	if d == Inside {
		return "inside"
	}
	return "outside"
}

// Reason is why a packet or datagram was not forwarded.
type Reason uint8

// Drop reasons. Their String values are the `reason` label of
// bridgehead_dropped_packets_total and must stay stable.
const (
	ReasonMalformed        Reason = iota // inner IP packet fails header checks
	ReasonNoRoute                        // destination in no site
	ReasonLocalDestination               // inside: destination in our own site (routing loop)
	ReasonNotLocal                       // outside: destination not in our site (no transit)
	ReasonTooBig                         // packet larger than the tunnel MTU
	ReasonQueueFull                      // no session yet and the peer's queue is full
	ReasonHandshakeTimeout               // queued packet dropped after handshake gave up
	ReasonNoSession                      // no usable session and no gateway to try
	ReasonSendError                      // UDP send failed
	ReasonRunt                           // datagram shorter than any message
	ReasonUnknownType                    // unknown message type
	ReasonBadSize                        // handshake message of the wrong size
	ReasonUnknownIndex                   // transport or response for no known session
	ReasonBadTag                         // authentication failed
	ReasonReplay                         // duplicate or out-of-window counter
	ReasonExpired                        // session older than RejectAfterTime or counter exhausted
	ReasonSpoofedSource                  // inner source outside the sending gateway's site
	ReasonBadMAC                         // handshake MAC1 wrong
	ReasonHandshakeFailed                // handshake did not decrypt or verify
	ReasonUnknownPeer                    // initiation from a static key not in config
	ReasonStaleHandshake                 // initiation timestamp not newer than the last
	ReasonHandshakeBusy                  // handshake queue full
	ReasonTUNWriteError                  // writing to the TUN failed
	ReasonNotUnicast                     // inside: multicast or link-local destination, never routed between sites
	ReasonCookieRequired                 // handshake under load without a valid cookie (mac2): answered with a cookie reply
	ReasonRateLimited                    // handshake over the per-source rate under load
	ReasonBadCookie                      // cookie reply that does not decrypt or answers nothing we sent
	ReasonTUNReadError                   // reading the TUN failed (the read, not one packet)
	ReasonUDPReadError                   // receiving from the UDP socket failed
	ReasonFQOverflow                     // inside: the fair queue was full; dropped from the head of the flow holding the most bytes
	ReasonCoDel                          // inside: its flow's queue delay stayed over the CoDel target (not ECN-capable, so not marked)
	ReasonFQExpired                      // inside: waited in the fair queue longer than its time bound
	ReasonStaleProbeReply                // probe reply that answers no probe in flight (late, a second answer, never asked; probestate.InFlight)
	ReasonRoamRefused                    // authenticated, but from a stand-in the gateway may not move to (delivered; its endpoint kept; outside.go roam)
	ReasonResponseLimited                // handshake response for a pending index that already had too many failed ones (handshake.go)
	ReasonExpressOverflow                // express socket: over the express lane's budget, or not an express transport message, while the spill loop was behind (outside_express.go); what it took is bridgehead_express_spilled_total, the over-budget express datagrams among that bridgehead_express_policed_total
	ReasonKeyExpired                     // handshake made with or to a previous static key after its overlap (keys.go)
	ReasonPSKMismatch                    // handshake whose preshared-key mode or key differs from this pair's (keys.go)
	ReasonSitePolicy                     // a site's allowedSources refuse the packet's source site: inside, our pods to a site that does not list ours; outside, a remote site's pods that ours does not list (sitepolicy.go)
	numReasons
)

var reasonNames = [numReasons]string{
	ReasonMalformed:        "malformed",
	ReasonNoRoute:          "no_route",
	ReasonLocalDestination: "local_destination",
	ReasonNotLocal:         "not_local_destination",
	ReasonTooBig:           "too_big",
	ReasonQueueFull:        "queue_full",
	ReasonHandshakeTimeout: "handshake_timeout",
	ReasonNoSession:        "no_session",
	ReasonSendError:        "send_error",
	ReasonRunt:             "runt",
	ReasonUnknownType:      "unknown_type",
	ReasonBadSize:          "bad_size",
	ReasonUnknownIndex:     "unknown_index",
	ReasonBadTag:           "bad_tag",
	ReasonReplay:           "replay",
	ReasonExpired:          "expired_session",
	ReasonSpoofedSource:    "spoofed_source",
	ReasonBadMAC:           "bad_mac",
	ReasonHandshakeFailed:  "handshake_failed",
	ReasonUnknownPeer:      "unknown_peer",
	ReasonStaleHandshake:   "stale_handshake",
	ReasonHandshakeBusy:    "handshake_busy",
	ReasonTUNWriteError:    "tun_write_error",
	ReasonNotUnicast:       "not_unicast",
	ReasonCookieRequired:   "cookie_required",
	ReasonRateLimited:      "rate_limited",
	ReasonBadCookie:        "bad_cookie",
	ReasonTUNReadError:     "tun_read_error",
	ReasonUDPReadError:     "udp_read_error",
	ReasonFQOverflow:       "fq_overflow",
	ReasonCoDel:            "codel",
	ReasonFQExpired:        "fq_expired",
	ReasonStaleProbeReply:  "stale_probe_reply",
	ReasonRoamRefused:      "roam_refused",
	ReasonResponseLimited:  "response_limited",
	ReasonExpressOverflow:  "express_overflow",
	ReasonSitePolicy:       "site_policy",
	ReasonKeyExpired:       "key_expired",
	ReasonPSKMismatch:      "psk_mismatch",
}

func (r Reason) String() string {
	if r < numReasons {
		return reasonNames[r]
	}
	return "unknown"
}

// Reasons lists every drop reason, in order.
func Reasons() []Reason {
	rs := make([]Reason, numReasons)
	for i := range rs {
		rs[i] = Reason(i)
	}
	return rs
}

// Drops counts dropped packets by direction and reason. The zero value is
// ready; all methods are safe for concurrent use and allocate nothing.
type Drops struct {
	n [numDirections][numReasons]atomic.Uint64
}

// Add counts k packets dropped for r in direction d.
func (d *Drops) Add(dir Direction, r Reason, k uint64) { d.n[dir][r].Add(k) }

// Get returns the count for one direction and reason.
func (d *Drops) Get(dir Direction, r Reason) uint64 { return d.n[dir][r].Load() }

// snapshot copies every counter.
func (d *Drops) snapshot() (s [numDirections][numReasons]uint64) {
	for i := range d.n {
		for j := range d.n[i] {
			s[i][j] = d.n[i][j].Load()
		}
	}
	return s
}
