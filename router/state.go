package router

import (
	"fmt"
	"net/netip"
	"time"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/packet"
	"github.com/bridgehead/bridgehead/router/flowhash"
	"github.com/bridgehead/bridgehead/router/lpm"
)

// Config is the routing part of a gateway's configuration: every site's
// prefixes and, for remote sites, their gateways.
type Config struct {
	// LocalSite names the site this gateway serves.
	LocalSite string
	Sites     []SiteConfig
	// ClampMSS lowers the MSS of TCP SYNs crossing the tunnel, both ways,
	// so TCP never needs path-MTU discovery through it.
	ClampMSS bool
	// ICMPSource4 and ICMPSource6 are this gateway's own addresses, the
	// sources of ICMP "too big" errors it sends back to local hosts.
	ICMPSource4, ICMPSource6 netip.Addr
	// BehindNAT: this gateway has no endpoint, so no peer can start a
	// session with it; it starts every session itself, at once.
	BehindNAT bool
}

// SiteConfig is one site: the prefixes it owns (node and pod CIDRs) and
// its gateways. Gateways of the local site are ignored.
type SiteConfig struct {
	Name     string
	Prefixes []netip.Prefix
	Gateways []PeerConfig
	// PodPrefixes are the site's pod CIDRs (in Prefixes too), the sources
	// that AllowedSources restricts (sitepolicy.go).
	PodPrefixes []netip.Prefix
	// AllowedSources names the remote sites whose pods may reach this
	// site; nil: every site, empty: none (sitepolicy.go).
	AllowedSources []string
}

// site is a published, immutable view of one site.
type site struct {
	name     string
	local    bool
	gateways []*Peer
	policy   sitePolicy // source allow-lists (sitepolicy.go)
}

// pick returns the gateway that carries pkt's flow. Among the site's
// gateways in the best tier — up with a usable session and a whole path,
// else up but MTU-degraded (see probestate.PathMTU), else any with a usable
// session, else any (a handshake starts there) — it takes the one
// that ranks first for the flow by rendezvous hashing: a flow stays on one
// gateway while the tier's members stay the same, and when a gateway
// leaves or returns only the flows ranked first on it move. It runs per
// packet and allocates nothing.
func (s *site) pick(pkt []byte, flows *flowhash.Table, now time.Time) *Peer {
	if len(s.gateways) < 2 {
		return s.pickFlow(0, now)
	}
	return s.pickFlow(flows.Hash(pkt), now) // fragments follow their flow (see package flowhash)
}

// pickFlow is pick for a packet whose flow hash (flowhash.Table.Hash) is
// known: the fair-queue inside path hashes packets in the order they were
// read, which is what the fragment table needs, and seals them later in
// another order.
func (s *site) pickFlow(flow uint64, now time.Time) *Peer {
	switch len(s.gateways) {
	case 0:
		return nil
	case 1:
		return s.gateways[0]
	}
	var best *Peer
	bestTier, bestScore := -1, uint64(0)
	for _, p := range s.gateways {
		tier := 0
		if kp := p.current.Load(); kp != nil && fresh(kp, now) {
			tier = 1
			if p.live.up() {
				tier = 2
				if !p.live.pmtu.Degraded() {
					tier = 3
				}
			}
		}
		if tier < bestTier {
			continue
		}
		score := packet.Mix(flow, p.rank.Load())
		if tier > bestTier || score > bestScore {
			best, bestTier, bestScore = p, tier, score
		}
	}
	return best
}

// routingState is everything the data path reads per packet. It is built
// whole by SetConfig and never modified after it is published.
type routingState struct {
	table lpm.Table[*site]
	sites map[string]*site
	peers map[bhcrypto.PublicKey]*Peer
	local *site
	// order is the peers in config order, for timers and status.
	order []*Peer
	// byEndpoint maps configured endpoints to peers: a hint (never
	// trusted for data) used to start a handshake when a peer keeps
	// sending on a session we no longer have, as after our restart.
	byEndpoint map[netip.AddrPort]*Peer
	// sources is the site source allow-lists' view (sitepolicy.go).
	sources sourcePolicy

	clampMSS     bool
	behindNAT    bool
	icmp4, icmp6 netip.Addr
	// probeTick is how often the handshake loop runs prober.run: a
	// quarter of the shortest probe interval, within [ProbeTick,
	// TimerTick].
	probeTick time.Duration
}

type peerKey struct{ site, name string }

// peerUpdate is the new endpoint, keepalive, probe interval and keys of
// a reused peer. buildState
// only collects them: SetConfig applies them once the whole config is
// accepted, so a refused config leaves running peers untouched.
type peerUpdate struct {
	p  *Peer
	pc PeerConfig
}

func (u peerUpdate) apply(now func() time.Time) {
	u.p.setKeys(u.pc, u.p.keys.Load(), now)
	u.p.setConfigEndpoint(u.pc.Endpoint)
	u.p.keepalive.Store(int64(u.pc.Keepalive))
	u.p.live.setInterval(u.pc.ProbeInterval)
}

// buildState validates c and builds a new routing state, reusing peers of
// old whose site, name and key are unchanged, or whose key is the new
// config's previous key (a rollover, keys.go), so their sessions survive.
// A peer's previous key finds it too (peers), for initiations made with it.
// It returns the new state, the peers of old that are gone and the
// settings to apply to reused peers. It changes nothing that is running:
// new peers are private to the new state until it is published.
func buildState(c *Config, old *routingState, own bhcrypto.PublicKey, newP func(PeerConfig) *Peer) (*routingState, []*Peer, []peerUpdate, error) {
	st := &routingState{
		sites:      make(map[string]*site),
		peers:      make(map[bhcrypto.PublicKey]*Peer),
		byEndpoint: make(map[netip.AddrPort]*Peer),
		clampMSS:   c.ClampMSS,
		behindNAT:  c.BehindNAT,
		icmp4:      c.ICMPSource4,
		icmp6:      c.ICMPSource6,
	}
	reuse := make(map[peerKey]*Peer)
	if old != nil {
		for _, p := range old.order {
			reuse[peerKey{p.site, p.name}] = p
		}
	}
	owner := make(map[netip.Prefix]string)
	var updates []peerUpdate
	shortest := time.Duration(MaxProbeInterval)
	for _, sc := range c.Sites {
		if sc.Name == "" {
			return nil, nil, nil, fmt.Errorf("router: site with empty name")
		}
		if _, dup := st.sites[sc.Name]; dup {
			return nil, nil, nil, fmt.Errorf("router: site %q listed twice", sc.Name)
		}
		s := &site{name: sc.Name, local: sc.Name == c.LocalSite}
		st.sites[sc.Name] = s
		if s.local {
			st.local = s
		}
		for _, pfx := range sc.Prefixes {
			if !pfx.IsValid() {
				return nil, nil, nil, fmt.Errorf("router: site %q: invalid prefix", sc.Name)
			}
			pfx = pfx.Masked()
			if o, dup := owner[pfx]; dup {
				return nil, nil, nil, fmt.Errorf("router: prefix %s belongs to both %q and %q", pfx, o, sc.Name)
			}
			owner[pfx] = sc.Name
			st.table.Insert(pfx, s)
		}
		if s.local {
			continue
		}
		for _, gc := range sc.Gateways {
			if gc.PublicKey == own {
				return nil, nil, nil, fmt.Errorf("router: gateway %s/%s has this gateway's own public key", sc.Name, gc.Name)
			}
			if _, dup := st.peers[gc.PublicKey]; dup {
				return nil, nil, nil, fmt.Errorf("router: gateway %s/%s: public key used twice", sc.Name, gc.Name)
			}
			if err := checkPeerKeys(gc, own, st.peers); err != nil {
				return nil, nil, nil, fmt.Errorf("router: gateway %s/%s: %w", sc.Name, gc.Name, err)
			}
			gc.Site = sc.Name
			p := reuse[peerKey{sc.Name, gc.Name}]
			if p != nil && !sameGateway(p, gc) {
				p = nil // a new key with no rollover: a new peer
			}
			if p == nil {
				p = newP(gc)
			} else {
				delete(reuse, peerKey{sc.Name, gc.Name})
				updates = append(updates, peerUpdate{p, gc})
			}
			shortest = min(shortest, probeInterval(gc.ProbeInterval))
			s.gateways = append(s.gateways, p)
			st.peers[gc.PublicKey] = p
			if !gc.PreviousPublicKey.IsZero() {
				st.peers[gc.PreviousPublicKey] = p
			}
			st.order = append(st.order, p)
			st.byEndpoint[gc.Endpoint] = p
		}
	}
	if st.local == nil {
		return nil, nil, nil, fmt.Errorf("router: local site %q is not in the site list", c.LocalSite)
	}
	if err := buildSourcePolicy(c, st, old); err != nil {
		return nil, nil, nil, err
	}
	st.probeTick = clampDuration(shortest/4, ProbeTick, TimerTick)
	gone := make([]*Peer, 0, len(reuse))
	for _, p := range reuse {
		gone = append(gone, p)
	}
	return st, gone, updates, nil
}
