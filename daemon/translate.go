package daemon

import (
	"fmt"
	"net/netip"
	"sync/atomic"
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
	rc.BehindNAT = behindNAT
	// Gateways both without endpoint are reached through a hub, at
	// the pseudo endpoint of their id in transitPlan (catalog order).
	relayed := c.CanBeRelayed()
	id := transit.GatewayID(0)
	for _, s := range c.Sites {
		sc := router.SiteConfig{Name: s.Name}
		sc.Prefixes = append(sc.Prefixes, s.NodeCIDRs...)
		sc.Prefixes = append(sc.Prefixes, s.PodCIDRs...)
		sc.PodPrefixes, sc.AllowedSources = s.PodCIDRs, s.AllowedSources // nil: every site (router/sitepolicy.go)
		for _, g := range s.Gateways {
			key, err := bhcrypto.ParsePublicKey(g.PublicKey)
			if err != nil {
				return nil, fmt.Errorf("site %s gateway %s: publicKey: %w", s.Name, g.Name, err)
			}
			ep := g.EndpointAddr
			if relayed && !g.HasEndpoint() && s.Name != c.Site {
				ep = transit.PseudoEndpoint(id)
			}
			id++
			sc.Gateways = append(sc.Gateways, router.PeerConfig{
				Site: s.Name, Name: g.Name, PublicKey: key, Endpoint: ep,
				Keepalive: keepalive(s.Keepalive, behindNAT && g.HasEndpoint()), ProbeInterval: s.ProbeInterval,
			})
		}
		rc.Sites = append(rc.Sites, sc)
	}
	if err := peerKeys(rc, c); err != nil { // previous keys, preshared keys (keys.go)
		return nil, err
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

// transitPlan is c's relay plan (package transit): every gateway of every
// site in catalog order, so that a gateway's id is the one routerConfig
// gives its pseudo endpoint, each site's hubs, and the local gateway.
func transitPlan(c *config.Config) (*transit.Plan, transit.GatewayID, error) {
	var gws []transit.Gateway
	self := transit.None
	for _, s := range c.Sites {
		for _, g := range s.Gateways {
			key, err := bhcrypto.ParsePublicKey(g.PublicKey)
			if err != nil {
				return nil, transit.None, fmt.Errorf("site %s gateway %s: publicKey: %w", s.Name, g.Name, err)
			}
			if s.Name == c.Site && g.Name == c.Gateway {
				self = transit.GatewayID(len(gws))
			}
			// The configured endpoint: a hub's hint naming it for
			// another gateway is refused (transit/direct.go).
			gws = append(gws, transit.Gateway{Site: s.Name, Name: g.Name, Key: key, Endpoint: g.EndpointAddr})
		}
	}
	plan, err := transit.NewPlan(gws, c.Hubs())
	if err != nil {
		return nil, transit.None, err
	}
	return plan, self, nil
}

// routerTable is the router's sessions for transit.Bind, which is made
// before the router.
type routerTable struct{ r atomic.Pointer[router.Router] }

func (t *routerTable) SessionByIndex(idx uint32) (*bhcrypto.Keypair, bhcrypto.PublicKey, bool) {
	r := t.r.Load()
	if r == nil {
		return nil, bhcrypto.PublicKey{}, false
	}
	return r.SessionByIndex(idx)
}

func (t *routerTable) CurrentSession(key bhcrypto.PublicKey) (*bhcrypto.Keypair, netip.AddrPort, bool) {
	r := t.r.Load()
	if r == nil {
		return nil, netip.AddrPort{}, false
	}
	return r.CurrentSession(key)
}

func (t *routerTable) PeerUp(key bhcrypto.PublicKey) bool {
	r := t.r.Load()
	return r != nil && r.PeerUp(key)
}

func (t *routerTable) NoteRelayed(key bhcrypto.PublicKey, n, bytes uint64) {
	if r := t.r.Load(); r != nil {
		r.NoteRelayed(key, n, bytes)
	}
}
