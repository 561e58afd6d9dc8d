package daemon

import (
	"fmt"
	"net/netip"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/netsetup"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/transit"
)

// routerConfig is the routing part of c: every site's node and pod CIDRs
// and the remote gateways.
func routerConfig(c *config.Config) (*router.Config, error) {
	rc := &router.Config{LocalSite: c.Site, ClampMSS: c.ClampMSSEnabled()}
	if gw := c.LocalGateway(); gw != nil {
		rc.ICMPSource4, rc.ICMPSource6 = gw.Address, gw.Address6
		if gw.Address.Is6() {
			rc.ICMPSource4, rc.ICMPSource6 = netip.Addr{}, gw.Address
		}
	}
	behindNAT := c.LocalGateway() != nil && !c.LocalGateway().HasEndpoint()
	for _, s := range c.Sites {
		sc := router.SiteConfig{Name: s.Name}
		sc.Prefixes = append(sc.Prefixes, s.NodeCIDRs...)
		sc.Prefixes = append(sc.Prefixes, s.PodCIDRs...)
		for _, g := range s.Gateways {
			key, err := bhcrypto.ParsePublicKey(g.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("site %s gateway %s: publicKey: %w", s.Name, g.Name, err)
			}
			sc.Gateways = append(sc.Gateways, router.PeerConfig{
				Site: s.Name, Name: g.Name, PublicKey: key, Endpoint: g.EndpointAddr,
				Keepalive: keepalive(s.Keepalive, behindNAT && g.HasEndpoint()), ProbeInterval: s.ProbeInterval,
			})
		}
		rc.Sites = append(rc.Sites, sc)
	}
	return rc, nil
}

// kernelState is the routes and link settings c asks of the kernel: every
// remote site's CIDRs into the TUN, and each listed local node's pod range
// toward that node.
func kernelState(c *config.Config, mtu int) netsetup.Want {
	w := netsetup.Want{Link: c.Interface.Name, MTU: mtu, Forwarding: true}
	for _, s := range c.Sites {
		if s.Name == c.Site {
			for _, n := range s.Nodes {
				w.Via = append(w.Via, netsetup.ViaRoute{Prefix: n.PodCIDR, Via: n.Address})
				if n.PodCIDR6.IsValid() && n.Address6.IsValid() {
					w.Via = append(w.Via, netsetup.ViaRoute{Prefix: n.PodCIDR6, Via: n.Address6})
				}
			}
			continue
		}
		w.Tunnel = append(w.Tunnel, s.NodeCIDRs...)
		w.Tunnel = append(w.Tunnel, s.PodCIDRs...)
	}
	return w
}

// keepalive is the keepalive interval toward a remote gateway: the site's
// setting, at most transit.NATKeepalive from a gateway behind NAT (no
// endpoint) toward one with an endpoint, whose sessions must keep the
// NAT's mapping open (see package transit).
func keepalive(site time.Duration, throughNAT bool) time.Duration {
	if throughNAT && (site == 0 || site > transit.NATKeepalive) {
		return transit.NATKeepalive
	}
	return site
}
