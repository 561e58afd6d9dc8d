package relay

import (
	"crypto/tls"
	"fmt"
	"net/netip"
	"slices"
	"time"
)

// Config is what the relay enforces. The daemon builds it from the
// config file's relay section and sites; SetConfig swaps it whole.
type Config struct {
	// LocalSite is this gateway's site: its addresses are never relayed
	// (its nodes are reached directly, and a relay into its own site
	// would hijack the site's kubelet traffic).
	LocalSite string
	// Sites are every site of the cluster, LocalSite included.
	Sites []Site
	// AllowedPorts are the destination ports a CONNECT may name.
	AllowedPorts []uint16
	// AllowPodCIDRs admits remote pod CIDRs besides node CIDRs.
	AllowPodCIDRs bool
	// MaxConnections bounds relayed connections (and, separately,
	// connections still sending their request);
	// MaxConnectionsPerDestination bounds those to one address:port.
	MaxConnections               int
	MaxConnectionsPerDestination int
	// IdleTimeout closes a connection quiet both ways for this long, or
	// one whose peer takes no bytes written to it for this long.
	IdleTimeout time.Duration
	// HeaderTimeout bounds the TLS handshake and the CONNECT request.
	HeaderTimeout time.Duration
	// DialTimeout bounds the connection to the destination (default 10 s).
	DialTimeout time.Duration
	// Source is the address relayed connections leave from: the
	// gateway's LAN address, inside its site's node CIDRs, so the remote
	// gateway accepts the packets as coming from this site. Invalid:
	// the kernel chooses. Source6 is the IPv6 counterpart.
	Source, Source6 netip.Addr
	// TLS, when not nil, is the server config: the relay speaks TLS and
	// the config decides which client certificates it accepts (LoadTLS
	// makes one that follows its files and pins client identities).
	TLS *tls.Config
	// MaxPendingPerSource bounds the connections one client source (an
	// IPv4 address, an IPv6 /64) may have in the request phase (TLS
	// handshake and CONNECT request), so that one client cannot hold
	// every slot of MaxConnections there. 0: DefaultMaxPendingPerSource,
	// at most MaxConnections.
	MaxPendingPerSource int
	// AllowedClients, when not empty, are the only source prefixes the
	// relay takes connections from; others are closed at once, before
	// any TLS or request (reason client_not_allowed). With or without
	// TLS.
	AllowedClients []netip.Prefix
}

// DefaultMaxPendingPerSource is MaxPendingPerSource's default: room for
// a busy API server's burst of callbacks, a sixteenth of the default
// MaxConnections.
const DefaultMaxPendingPerSource = 64

// maxPendingPerSource is c's per-source bound in the request phase.
func (c *Config) maxPendingPerSource() int {
	n := c.MaxPendingPerSource
	if n <= 0 {
		n = DefaultMaxPendingPerSource
	}
	return min(n, c.MaxConnections)
}

// clientAllowed reports whether a client at src may connect.
func (c *Config) clientAllowed(src netip.Addr) bool {
	if len(c.AllowedClients) == 0 {
		return true
	}
	return containsAny(c.AllowedClients, src.Unmap())
}

// sourceKey is the unit of the per-source bound: an IPv4 address, or the
// /64 of an IPv6 one (a single host usually holds a whole /64).
func sourceKey(a netip.Addr) netip.Prefix {
	a = a.Unmap()
	if a.Is4() {
		return netip.PrefixFrom(a, 32)
	}
	p, _ := a.Prefix(64)
	return p
}

// Site is one site's address plan as the relay sees it.
type Site struct {
	Name      string
	NodeCIDRs []netip.Prefix
	PodCIDRs  []netip.Prefix
}

// DefaultDialTimeout bounds a dial when Config.DialTimeout is zero.
const DefaultDialTimeout = 10 * time.Second

func (c *Config) validate() error {
	switch {
	case c.MaxConnections <= 0:
		return fmt.Errorf("relay: MaxConnections %d must be positive", c.MaxConnections)
	case c.MaxConnectionsPerDestination <= 0:
		return fmt.Errorf("relay: MaxConnectionsPerDestination %d must be positive", c.MaxConnectionsPerDestination)
	case c.IdleTimeout <= 0 || c.HeaderTimeout <= 0:
		return fmt.Errorf("relay: IdleTimeout and HeaderTimeout must be positive")
	case len(c.AllowedPorts) == 0:
		return fmt.Errorf("relay: no allowed ports")
	case c.MaxPendingPerSource < 0:
		return fmt.Errorf("relay: MaxPendingPerSource %d must not be negative", c.MaxPendingPerSource)
	}
	for _, p := range c.AllowedClients {
		if !p.IsValid() {
			return fmt.Errorf("relay: AllowedClients holds an invalid prefix")
		}
	}
	return nil
}

// verdict is the policy's answer for one destination.
type verdict struct {
	site   string // the remote site of an allowed destination
	reason Reason // ReasonNone when allowed
	why    string // for the 403 body and the log
}

// decide applies the allow-list: an address inside a remote site's node
// CIDRs (pod CIDRs with AllowPodCIDRs), on an allowed port.
func (c *Config) decide(dst netip.AddrPort) verdict {
	a := dst.Addr().Unmap()
	site, pod, local := "", false, false
	for _, s := range c.Sites {
		if containsAny(s.NodeCIDRs, a) {
			site, local = s.Name, s.Name == c.LocalSite
			break
		}
		if containsAny(s.PodCIDRs, a) {
			site, pod, local = s.Name, true, s.Name == c.LocalSite
			break
		}
	}
	switch {
	case site == "":
		return verdict{reason: ReasonNotInSite, why: fmt.Sprintf("%s is not in any site's node CIDRs", a)}
	case local:
		return verdict{reason: ReasonLocalSite, why: fmt.Sprintf("%s is in the local site %s, not a remote one", a, site)}
	case pod && !c.AllowPodCIDRs:
		return verdict{reason: ReasonPodCIDR, why: fmt.Sprintf("%s is a pod address of site %s (allowPodCIDRs is off)", a, site)}
	case !slices.Contains(c.AllowedPorts, dst.Port()):
		return verdict{reason: ReasonPort, why: fmt.Sprintf("port %d is not in allowedPorts %v", dst.Port(), c.AllowedPorts)}
	}
	return verdict{site: site}
}

func containsAny(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}
