package daemon

import (
	"net/netip"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/transit"
)

// Paths to remote gateways: direct, or through hub gateways (package
// transit). status, verify (through status) and the metrics below all
// read them from the relay path's Bind, whose choice they report.

// pathFinder answers which hub gateways carry the flows toward a
// router endpoint (transit.Bind.Via).
type pathFinder interface {
	Via(ep netip.AddrPort) ([]transit.Gateway, bool)
	Direct(ep netip.AddrPort) (netip.AddrPort, bool)
}

// withPaths sets Path and Via of every peer from pf (nil: all direct).
func withPaths(peers []health.PeerState, pf pathFinder) []health.PeerState {
	for i := range peers {
		p := &peers[i]
		p.Path = health.PathDirect
		if pf == nil {
			continue
		}
		if at, ok := pf.Direct(p.Endpoint); ok {
			p.DirectAt = at.String()
			continue
		}
		via, relayed := pf.Via(p.Endpoint)
		if !relayed {
			continue
		}
		p.Path = health.PathHub
		for _, h := range via {
			p.Via = append(p.Via, h.Site+"/"+h.Name)
		}
	}
	return peers
}

// pathCollector exports the path to every remote gateway. Its series
// are per remote gateway (and per hub gateway of the catalog), never per
// flow: bridgehead_peer_path{site,gateway,path} is 1 for the path in use
// and 0 for the other; bridgehead_peer_via_hub{site,gateway,hub_site,
// hub_gateway} is 1 for each hub gateway carrying the gateway's flows.
// The round trip along the path is bridgehead_peer_probe_rtt_seconds.
type pathCollector struct {
	peers     func() []health.PeerState
	path, via *prometheus.Desc
}

func newPathCollector(peers func() []health.PeerState) *pathCollector {
	return &pathCollector{
		peers: peers,
		path: prometheus.NewDesc("bridgehead_peer_path",
			"1 for the path datagrams to a remote gateway take now: direct, or hub (relayed through a hub site, see bridgehead_peer_via_hub); 0 for the other. bridgehead_peer_probe_rtt_seconds is measured along it.",
			[]string{"site", "gateway", "path"}, nil),
		via: prometheus.NewDesc("bridgehead_peer_via_hub",
			"1 for each hub gateway that carries flows to a remote gateway reached through a hub (a relayed flow takes one of them by its hash).",
			[]string{"site", "gateway", "hub_site", "hub_gateway"}, nil),
	}
}

func (c *pathCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.path
	ch <- c.via
}

func (c *pathCollector) Collect(ch chan<- prometheus.Metric) {
	for _, p := range c.peers() {
		for _, path := range []string{health.PathDirect, health.PathHub} {
			v := 0.0
			if p.Path == path {
				v = 1
			}
			ch <- prometheus.MustNewConstMetric(c.path, prometheus.GaugeValue, v, p.Site, p.Gateway, path)
		}
		for _, h := range p.Via {
			site, gw, _ := strings.Cut(h, "/")
			ch <- prometheus.MustNewConstMetric(c.via, prometheus.GaugeValue, 1, p.Site, p.Gateway, site, gw)
		}
	}
}
