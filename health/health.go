// Package health decides whether a gateway is ready from what its data
// path has seen: a remote site counts as reachable only while one of its
// gateways is up in the router's liveness state (it answered our probes
// within three probe intervals; see router.LiveState). Completed
// handshakes and queued packets alone do not make a site reachable.
//
// Readiness is what a load balancer in front of a site's gateways asks:
// a gateway is ready while it reaches at least one remote site (or there
// is none), so a remote site's outage does not drain every gateway of
// ours, while a gateway cut off from every site is drained.
//
// A remote gateway that says it is draining (shutting down, see
// router.SetDraining) keeps its site reachable: it still forwards while
// the site's other gateways take its flows.
//
// Everything here is a pure function of its arguments: callers take a
// snapshot of the router (PeerStates), pick the time, and evaluate. Nothing
// is retained, so the functions are safe for concurrent use.
package health

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/router"
)

// Gateway states reported in GatewayReport.State.
const (
	// StateUp: the router reports the gateway up.
	StateUp = "up"
	// StateDown: the gateway was up, then stayed silent for three probe
	// intervals although probed.
	StateDown = "down"
	// StateConnecting: nothing received yet, but packets are queued for
	// the gateway or a handshake has completed.
	StateConnecting = "connecting"
	// StateNever: nothing received and nothing under way.
	StateNever = "never"
	// StateDraining: the gateway says it is shutting down
	// (router.DownDraining). It gets no new flows but still forwards,
	// so its site counts as reachable through it: one site's rolling
	// upgrade does not make the other sites' gateways unready.
	StateDraining = "draining"
)

// PeerState is a snapshot of one remote gateway as the data path sees it.
// Zero times mean "never".
type PeerState struct {
	Site           string         `json:"site"`
	Gateway        string         `json:"gateway"`
	Endpoint       netip.AddrPort `json:"endpoint"`
	LastHandshake  time.Time      `json:"lastHandshake,omitzero"`
	LastReceive    time.Time      `json:"lastReceive,omitzero"`
	TxBytes        uint64         `json:"txBytes"`
	RxBytes        uint64         `json:"rxBytes"`
	TxPackets      uint64         `json:"txPackets"`
	RxPackets      uint64         `json:"rxPackets"`
	SessionCreated time.Time      `json:"sessionCreated,omitzero"`
	QueuedPackets  int            `json:"queuedPackets"`
	// Keepalive is the keepalive interval toward the gateway (0: off),
	// in nanoseconds in JSON.
	Keepalive time.Duration `json:"keepalive"`
	// Down is set while the router reports the gateway down.
	Down bool `json:"down,omitempty"`
	// Live is the router's liveness state: up, down or connecting.
	Live router.LivenessStats `json:"live"`
	// Path is how datagrams reach the gateway: PathDirect, or PathHub
	// through the hub gateways Via ("site/gateway") that carry its
	// flows now (a relayed flow takes one of them by its hash). Set by
	// the daemon, which knows the relay path; Live.ProbeRTT is measured
	// along this path.
	Path string   `json:"path,omitempty"`
	Via  []string `json:"via,omitempty"`
	// DirectAt is where datagrams go when a gateway reached through a
	// hub is reached directly now (its NAT's mapping, hole punched;
	// Path is PathDirect).
	DirectAt string `json:"directAt,omitempty"`
	// Handshakes with the gateway, by result.
	HandshakesInitiated uint64 `json:"handshakesInitiated"`
	HandshakesAnswered  uint64 `json:"handshakesAnswered"`
	HandshakesCompleted uint64 `json:"handshakesCompleted"`
	HandshakesFailed    uint64 `json:"handshakesFailed"`
	// HandshakeSendErrors counts handshake messages that could not be
	// sent to the gateway (no route, for one).
	HandshakeSendErrors uint64 `json:"handshakeSendErrors"`
	// Key rollover and preshared keys (router.PeerStats): handshakes
	// made with a previous key during an overlap, completed with the
	// pair's second preshared key, or refused for a preshared key that
	// differs; and when the gateway's previous key stops being accepted
	// (zero outside a rollover).
	HandshakesPreviousKey uint64    `json:"handshakesPreviousKey,omitempty"`
	HandshakesSecondPSK   uint64    `json:"handshakesSecondPSK,omitempty"`
	PSKMismatches         uint64    `json:"pskMismatches,omitempty"`
	PreviousKeyUntil      time.Time `json:"previousKeyUntil,omitzero"`
	// LaneBytes and Express: the gateway said, on the session in use,
	// that it reads lane bytes and has an express lane
	// (router.PeerStats).
	LaneBytes bool `json:"laneBytes,omitempty"`
	Express   bool `json:"express,omitempty"`
}

// Paths of PeerState.Path.
const (
	PathDirect = "direct"
	PathHub    = "hub"
)

// PathText is the path as status and verify show it: "direct", "direct
// to 203.0.113.12:51820" (a gateway behind NAT, hole punched), "via hub
// a/gw-a1, a/gw-a2", "via hub (no session)" while no hub gateway has a
// session, or "-" when unknown.
func (p *PeerState) PathText() string {
	switch {
	case p.Path == PathDirect && p.DirectAt != "":
		return "direct to " + p.DirectAt
	case p.Path == PathDirect:
		return "direct"
	case p.Path == PathHub && len(p.Via) == 0:
		return "via hub (no session)"
	case p.Path == PathHub:
		return "via hub " + strings.Join(p.Via, ", ")
	}
	return "-"
}

// SiteReport is the readiness of one remote site.
type SiteReport struct {
	Site  string `json:"site"`
	Ready bool   `json:"ready"`
	// Reason says why the site is not ready; it is empty when it is.
	Reason   string          `json:"reason,omitempty"`
	Gateways []GatewayReport `json:"gateways"`
}

// GatewayReport is the state of one gateway of a remote site.
type GatewayReport struct {
	Gateway string `json:"gateway"`
	// State is one of StateUp, StateDown, StateDraining,
	// StateConnecting, StateNever.
	State       string    `json:"state"`
	LastReceive time.Time `json:"lastReceive,omitzero"`
}

// Report is the readiness of a gateway.
type Report struct {
	// Ready is set while at least one remote site is reachable, or
	// there is no remote site: what /readyz and a load balancer use.
	Ready bool `json:"ready"`
	// AllSites is set while every remote site is reachable: what
	// `bridgehead status` exits on.
	AllSites bool         `json:"allSites"`
	Sites    []SiteReport `json:"sites"`
	// LAN says why this gateway cannot deliver to its own site (its LAN
	// side is broken); Ready is then false. Empty while it can. Set by
	// the daemon, not by Evaluate.
	LAN string `json:"lan,omitempty"`
	// Draining is set once this gateway is shutting down (SIGTERM):
	// Ready is then false, so the load balancer in front of its site's
	// gateways moves the LAN side away. Set by the daemon.
	Draining bool `json:"draining,omitempty"`
}

// PeerStates converts a router snapshot (Router.Peers) to PeerStates,
// keeping the order.
func PeerStates(stats []router.PeerStats) []PeerState {
	out := make([]PeerState, len(stats))
	for i, s := range stats {
		out[i] = PeerState{
			Site: s.Site, Gateway: s.Name, Endpoint: s.Endpoint,
			LastHandshake: s.LastHandshake, LastReceive: s.LastReceive,
			TxBytes: s.TxBytes, RxBytes: s.RxBytes,
			TxPackets: s.TxPackets, RxPackets: s.RxPackets,
			SessionCreated: s.SessionCreated, QueuedPackets: s.QueuedPackets,
			Keepalive: s.Keepalive,
			Down:      s.Down,
			Live:      s.Live,

			HandshakesInitiated: s.HandshakesInitiated,
			HandshakesAnswered:  s.HandshakesAnswered,
			HandshakesCompleted: s.HandshakesCompleted,
			HandshakesFailed:    s.HandshakesFailed,
			HandshakeSendErrors: s.HandshakeSendErrors,

			HandshakesPreviousKey: s.HandshakesPreviousKey,
			HandshakesSecondPSK:   s.HandshakesSecondPSK,
			PSKMismatches:         s.PSKMismatches,
			PreviousKeyUntil:      s.PreviousKeyUntil,

			LaneBytes: s.LaneBytes,
			Express:   s.Express,
		}
	}
	return out
}

// Evaluate reports the readiness of every site in sites (all site names,
// in config order) except localSite. A remote site is reachable when at
// least one of its gateways is up; a site with no gateways among peers
// never is. Peers of sites not listed are ignored. Sites and their
// gateways keep the order of sites and peers.
func Evaluate(localSite string, sites []string, peers []PeerState, now time.Time) Report {
	rep := Report{AllSites: true, Sites: []SiteReport{}}
	for _, site := range sites {
		if site == localSite {
			continue
		}
		sr := evaluateSite(site, peers, now)
		rep.AllSites = rep.AllSites && sr.Ready
		rep.Ready = rep.Ready || sr.Ready
		rep.Sites = append(rep.Sites, sr)
	}
	if len(rep.Sites) == 0 {
		rep.Ready = true
	}
	return rep
}

func evaluateSite(site string, peers []PeerState, now time.Time) SiteReport {
	sr := SiteReport{Site: site, Gateways: []GatewayReport{}}
	var newest *PeerState // down gateway heard from most recently
	connecting := false
	for i := range peers {
		p := &peers[i]
		if p.Site != site {
			continue
		}
		st := gatewayState(p)
		sr.Gateways = append(sr.Gateways, GatewayReport{Gateway: p.Gateway, State: st, LastReceive: p.LastReceive})
		switch st {
		case StateUp, StateDraining:
			sr.Ready = true
		case StateDown:
			if newest == nil || p.LastReceive.After(newest.LastReceive) {
				newest = p
			}
		case StateConnecting:
			connecting = true
		}
	}
	switch {
	case sr.Ready:
	case len(sr.Gateways) == 0:
		sr.Reason = "no gateways configured"
	case newest != nil:
		sr.Reason = fmt.Sprintf("every gateway down; last authenticated packet from %s %s ago",
			newest.Gateway, max(now.Sub(newest.LastReceive), 0).Round(time.Second))
	case connecting:
		sr.Reason = "connecting: no authenticated packet received yet"
	default:
		sr.Reason = "no packet ever received from any gateway"
	}
	return sr
}

// gatewayState classifies one gateway from the router's liveness state.
func gatewayState(p *PeerState) string {
	switch p.Live.State {
	case router.LiveUp:
		return StateUp
	case router.LiveDown:
		if p.Live.Reason == router.DownDraining {
			return StateDraining
		}
		return StateDown
	}
	if p.QueuedPackets > 0 || !p.LastHandshake.IsZero() {
		return StateConnecting
	}
	return StateNever
}
