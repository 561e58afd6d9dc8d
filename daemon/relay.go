package daemon

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/relay"
)

// relayConfig is the relay part of c: its limits and the address plan it
// enforces. It reads the TLS files, so a reload with unreadable ones is
// refused before anything changes. Nil when the relay is off.
func relayConfig(c *config.Config) (*relay.Config, error) {
	rl := c.Relay
	if rl == nil {
		return nil, nil
	}
	tlsConf, err := config.LoadRelayTLS(c)
	if err != nil {
		return nil, fmt.Errorf("relay.tls: %w", err)
	}
	rc := &relay.Config{
		LocalSite: c.Site, AllowPodCIDRs: rl.AllowPodCIDRs,
		MaxConnections: rl.MaxConnections, MaxConnectionsPerDestination: rl.MaxConnectionsPerDestination,
		IdleTimeout: rl.IdleTimeout, HeaderTimeout: rl.HeaderTimeout, TLS: tlsConf,
		MaxPendingPerSource: rl.MaxPendingPerSource, AllowedClients: rl.AllowedClients,
	}
	for _, p := range rl.AllowedPorts {
		rc.AllowedPorts = append(rc.AllowedPorts, uint16(p))
	}
	if gw := c.LocalGateway(); gw != nil {
		rc.Source, rc.Source6 = gw.Address, gw.Address6
		if gw.Address.Is6() {
			rc.Source, rc.Source6 = netip.Addr{}, gw.Address
		}
	}
	for _, s := range c.Sites {
		rc.Sites = append(rc.Sites, relay.Site{Name: s.Name, NodeCIDRs: s.NodeCIDRs, PodCIDRs: s.PodCIDRs})
	}
	return rc, nil
}

// startRelay listens on the relay address of c and serves CONNECT until
// the returned relay is closed. Nil, nil when the relay is off.
func startRelay(c *config.Config, reg prometheus.Registerer, log *slog.Logger) (*relay.Relay, error) {
	rc, err := relayConfig(c)
	if err != nil || rc == nil {
		return nil, err
	}
	r, err := relay.New(relay.Options{Config: *rc, Logger: log, Registry: reg})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", c.Relay.ListenAddr.String())
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("relay listen %s: %w", c.Relay.ListenAddr, err)
	}
	r.Start(ln)
	tlsNote := "plain TCP"
	if rc.TLS != nil {
		tlsNote = "TLS, client certificates required"
	}
	log.Info("relay listening", "addr", ln.Addr().String(), "transport", tlsNote,
		"allowed_ports", rc.AllowedPorts, "allow_pod_cidrs", rc.AllowPodCIDRs,
		"allowed_clients", rc.AllowedClients)
	return r, nil
}

// relayListen is the relay's address, "" when it is off: a reload that
// changes it starts, moves or stops the relay.
func relayListen(c *config.Config) string {
	if c.Relay == nil {
		return ""
	}
	return c.Relay.ListenAddr.String()
}
