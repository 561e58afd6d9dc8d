package transit

import (
	"fmt"
	"net/netip"
	"slices"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
)

// GatewayID names a gateway of a Plan: its index in the gateways passed
// to NewPlan. The router maps its peers to these.
type GatewayID int32

// None is no gateway.
const None GatewayID = -1

// Gateway is one gateway of the catalog as the relay path sees it.
type Gateway struct {
	Site, Name string
	Key        bhcrypto.PublicKey
	// Endpoint is the gateway's configured endpoint, if it has one: a
	// spoke refuses a hint naming it for another gateway (direct.go).
	Endpoint netip.AddrPort
}

// Plan says which gateway each KeyID is and who relays for whom. It is
// immutable once NewPlan returns; a new catalog makes a new Plan.
type Plan struct {
	gws   []Gateway
	ids   []bhcrypto.KeyID
	site  []int32 // site index of each gateway
	byKey map[bhcrypto.KeyID]GatewayID
	// uses[s] lists the site indices site s relays through, sorted.
	uses  [][]int32
	sites []string
}

// NewPlan builds a Plan. hubs maps a site name to the hub sites it
// relays through (config.Config.HubsOf); a site missing from it relays
// through none. It refuses two gateways with one KeyID and hub sites that
// have no gateway in gateways.
func NewPlan(gateways []Gateway, hubs map[string][]string) (*Plan, error) {
	p := &Plan{
		gws:   slices.Clone(gateways),
		ids:   make([]bhcrypto.KeyID, len(gateways)),
		site:  make([]int32, len(gateways)),
		byKey: make(map[bhcrypto.KeyID]GatewayID, len(gateways)),
	}
	siteIdx := map[string]int32{}
	for i, g := range gateways {
		id := bhcrypto.KeyIDOf(g.Key)
		if j, dup := p.byKey[id]; dup {
			return nil, fmt.Errorf("gateways %s/%s and %s/%s share the key ID %x", gateways[j].Site, gateways[j].Name, g.Site, g.Name, id[:])
		}
		p.byKey[id] = GatewayID(i)
		p.ids[i] = id
		s, ok := siteIdx[g.Site]
		if !ok {
			s = int32(len(p.sites))
			siteIdx[g.Site] = s
			p.sites = append(p.sites, g.Site)
		}
		p.site[i] = s
	}
	p.uses = make([][]int32, len(p.sites))
	for site, hs := range hubs {
		s, ok := siteIdx[site]
		if !ok {
			continue // a site without gateways sends nothing
		}
		for _, h := range hs {
			hi, ok := siteIdx[h]
			if !ok {
				return nil, fmt.Errorf("site %s relays through %s, which has no gateway", site, h)
			}
			p.uses[s] = append(p.uses[s], hi)
		}
		slices.Sort(p.uses[s])
		p.uses[s] = slices.Compact(p.uses[s])
	}
	return p, nil
}

// Len is the number of gateways.
func (p *Plan) Len() int { return len(p.gws) }

// Gateway returns gateway id.
func (p *Plan) Gateway(id GatewayID) Gateway { return p.gws[id] }

// KeyID returns gateway id's KeyID.
func (p *Plan) KeyID(id GatewayID) bhcrypto.KeyID { return p.ids[id] }

// Lookup finds the gateway of a KeyID. It does not allocate.
func (p *Plan) Lookup(k bhcrypto.KeyID) (GatewayID, bool) {
	id, ok := p.byKey[k]
	return id, ok
}

// ByKey finds the gateway of a public key.
func (p *Plan) ByKey(k bhcrypto.PublicKey) (GatewayID, bool) {
	id, ok := p.byKey[bhcrypto.KeyIDOf(k)]
	if !ok || p.gws[id].Key != k {
		return None, false
	}
	return id, true
}

// Allowed reports whether a gateway of site hub may relay from src to
// dst: both src's site and dst's site relay through hub (the
// destination's hubs bind as the source's do: a site that does not name
// a hub is never reached through it), src and dst are of different sites,
// neither is of the hub's site and neither has an endpoint of its own
// (those are reached directly). It does not allocate.
func (p *Plan) Allowed(hub, src, dst GatewayID) bool {
	if hub < 0 || src < 0 || dst < 0 || int(hub) >= len(p.gws) || int(src) >= len(p.gws) || int(dst) >= len(p.gws) {
		return false
	}
	hs, ss, ds := p.site[hub], p.site[src], p.site[dst]
	if ss == ds || ss == hs || ds == hs {
		return false
	}
	if p.gws[src].Endpoint.IsValid() || p.gws[dst].Endpoint.IsValid() {
		return false
	}
	_, srcUses := slices.BinarySearch(p.uses[ss], hs)
	_, dstUses := slices.BinarySearch(p.uses[ds], hs)
	return srcUses && dstUses
}

// Hubs returns the gateways that can relay for src toward dst, in Plan
// order: every gateway of every hub site both src's and dst's sites
// name (Allowed).
func (p *Plan) Hubs(src, dst GatewayID) []GatewayID {
	var out []GatewayID
	for h := range p.gws {
		if p.Allowed(GatewayID(h), src, dst) {
			out = append(out, GatewayID(h))
		}
	}
	return out
}
