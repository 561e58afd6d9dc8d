package config

import (
	"crypto/tls"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/relay"
)

// Defaults of the relay section.
const (
	DefaultRelayPort                  = 10250
	DefaultRelayMaxConnections        = 1024
	DefaultRelayMaxConnectionsPerDest = 64
	DefaultRelayIdleTimeout           = 10 * time.Minute
	DefaultRelayHeaderTimeout         = 10 * time.Second
	maxRelayConnections               = 1 << 20
	relayPortMin, relayPortMax        = 1, 65535
	relayFieldTLS, relayFieldListen   = "relay.tls", "relay.listen"
	relayFieldPorts                   = "relay.allowedPorts"
)

// Relay is the HTTP CONNECT relay for API-server callbacks (package
// relay). The relay is off when the section is absent (Config.Relay nil).
type Relay struct {
	// Listen is the TCP IP:port on the gateway's LAN side.
	Listen string `yaml:"listen"`
	// AllowedPorts are the destination ports a CONNECT may name
	// (default [10250], the kubelet).
	AllowedPorts []int `yaml:"allowedPorts"`
	// AllowPodCIDRs lets CONNECT name addresses in remote sites' pod
	// CIDRs too; by default only their node CIDRs.
	AllowPodCIDRs bool `yaml:"allowPodCIDRs"`
	// TLS, when set, serves the relay over TLS and requires a client
	// certificate signed by ClientCAFile.
	TLS *RelayTLS `yaml:"tls"`
	// MaxConnections bounds relayed connections in total.
	MaxConnections int `yaml:"maxConnections"`
	// MaxConnectionsPerDestination bounds relayed connections per
	// destination address and port.
	MaxConnectionsPerDestination int `yaml:"maxConnectionsPerDestination"`
	// IdleTimeout closes a relayed connection with no bytes either way
	// for this long, or whose destination or client takes none of the
	// bytes relayed toward it for this long (it stopped reading).
	IdleTimeout time.Duration `yaml:"idleTimeout"`
	// HeaderTimeout cuts off a client that has not completed its TLS
	// handshake and CONNECT request within it.
	HeaderTimeout time.Duration `yaml:"headerTimeout"`
	// MaxPendingPerSource bounds the connections one client address
	// (IPv6: /64) may have in the request phase; 0: the relay's default
	// (relay.DefaultMaxPendingPerSource).
	MaxPendingPerSource int `yaml:"maxPendingPerSource"`
	// AllowedClients, when set, are the only client prefixes the relay
	// takes connections from, with or without TLS.
	AllowedClients []netip.Prefix `yaml:"allowedClients"`

	// ListenAddr is Listen parsed.
	ListenAddr netip.AddrPort `yaml:"-"`
}

// RelayTLS names the relay's certificate, key and the CA of the clients
// it accepts. Relative paths are taken relative to the config file.
type RelayTLS struct {
	// CertFile is the relay's serving certificate (PEM).
	CertFile string `yaml:"certFile"`
	// KeyFile is the serving certificate's private key (PEM).
	KeyFile string `yaml:"keyFile"`
	// ClientCAFile is the CA that signs the certificates of the clients
	// the relay accepts (PEM).
	ClientCAFile string `yaml:"clientCAFile"`
	// ClientNames, when set, pins the clients: a certificate signed by
	// ClientCAFile must also carry one of these as its subject common
	// name, a DNS name or a URI (relay.TLSFiles).
	ClientNames []string `yaml:"clientNames"`
}

// RelayPath is p taken relative to the directory of the config file when
// it is not absolute.
func (c *Config) RelayPath(p string) string {
	if p == "" || filepath.IsAbs(p) || c.Path == "" {
		return p
	}
	return filepath.Join(filepath.Dir(c.Path), p)
}

func (d *decoder) relay(n *yaml.Node, path string, c *Config) {
	r := &Relay{}
	c.Relay = r
	d.mapping(n, path, []field{
		{"listen", d.str(&r.Listen)},
		{"allowedPorts", func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string) {
				r.AllowedPorts = append(r.AllowedPorts, d.intIn(n, path, relayPortMin, relayPortMax))
			})
		}},
		{"allowPodCIDRs", func(n *yaml.Node, path string) {
			var b *bool
			d.boolPtr(&b)(n, path)
			r.AllowPodCIDRs = b != nil && *b
		}},
		{"tls", func(n *yaml.Node, path string) {
			r.TLS = &RelayTLS{}
			d.mapping(n, path, []field{
				{"certFile", d.str(&r.TLS.CertFile)},
				{"keyFile", d.str(&r.TLS.KeyFile)},
				{"clientCAFile", d.str(&r.TLS.ClientCAFile)},
				{"clientNames", d.strs(&r.TLS.ClientNames)},
			})
		}},
		{"maxPendingPerSource", func(n *yaml.Node, path string) {
			r.MaxPendingPerSource = d.intIn(n, path, 1, maxRelayConnections)
		}},
		{"allowedClients", d.prefixes(&r.AllowedClients)},
		{"maxConnections", func(n *yaml.Node, path string) {
			r.MaxConnections = d.intIn(n, path, 1, maxRelayConnections)
		}},
		{"maxConnectionsPerDestination", func(n *yaml.Node, path string) {
			r.MaxConnectionsPerDestination = d.intIn(n, path, 1, maxRelayConnections)
		}},
		{"idleTimeout", d.duration(&r.IdleTimeout)},
		{"headerTimeout", d.duration(&r.HeaderTimeout)},
	})
}

// intIn decodes an integer in [lo, hi]; 0 when it is not one.
func (d *decoder) intIn(n *yaml.Node, path string, lo, hi int) int {
	s, ok := d.scalar(n, path)
	if !ok {
		return 0
	}
	v, err := strconv.ParseInt(s, 0, 64)
	if deref(n).ShortTag() != "!!int" || err != nil {
		d.errorAt(n.Line, path, "%q is not a whole number", s)
		return 0
	}
	if v < int64(lo) || v > int64(hi) {
		d.errorAt(n.Line, path, "%d is out of range %d..%d", v, lo, hi)
		return 0
	}
	return int(v)
}

// relayDefaults fills in what the relay section left out.
func relayDefaults(r *Relay) {
	if r == nil {
		return
	}
	if len(r.AllowedPorts) == 0 {
		r.AllowedPorts = []int{DefaultRelayPort}
	}
	if r.MaxConnections == 0 {
		r.MaxConnections = DefaultRelayMaxConnections
	}
	if r.MaxConnectionsPerDestination == 0 {
		r.MaxConnectionsPerDestination = min(DefaultRelayMaxConnectionsPerDest, r.MaxConnections)
	}
	if r.IdleTimeout == 0 {
		r.IdleTimeout = DefaultRelayIdleTimeout
	}
	if r.HeaderTimeout == 0 {
		r.HeaderTimeout = DefaultRelayHeaderTimeout
	}
}

// checkRelay (Parse): listen is IP:port, ports are unique, the limits
// agree and the TLS section names all three files.
func checkRelay(c *Config, r *reporter) {
	rl := c.Relay
	if rl == nil {
		return
	}
	switch ap, err := netip.ParseAddrPort(rl.Listen); {
	case rl.Listen == "":
		r.errorf(relayFieldListen, "is required: the LAN-side IP:port the relay listens on (e.g. 10.224.0.4:8131)")
	case err != nil || ap.Addr().Zone() != "":
		r.errorf(relayFieldListen, "%q is not IP:port (e.g. 10.224.0.4:8131)", rl.Listen)
	case ap.Port() == 0:
		r.errorf(relayFieldListen, "%q: port 0 is not allowed", rl.Listen)
	default:
		rl.ListenAddr = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	seen := map[int]int{}
	for i, p := range rl.AllowedPorts {
		if p == 0 {
			continue // reported while decoding
		}
		if first, dup := seen[p]; dup {
			r.errorf(indexPath(relayFieldPorts, i), "port %d is listed twice (also allowedPorts[%d])", p, first)
			continue
		}
		seen[p] = i
	}
	if rl.MaxConnectionsPerDestination > rl.MaxConnections {
		r.errorf("relay.maxConnectionsPerDestination", "%d is more than maxConnections (%d)", rl.MaxConnectionsPerDestination, rl.MaxConnections)
	}
	if t := rl.TLS; t != nil {
		for _, f := range []struct{ name, val string }{
			{"certFile", t.CertFile}, {"keyFile", t.KeyFile}, {"clientCAFile", t.ClientCAFile},
		} {
			if f.val == "" {
				r.errorf(joinPath(relayFieldTLS, f.name), "is required when relay.tls is set")
			}
		}
	}
}

// checkRelayPlan (Check): the relay's address is not routed into the
// tunnel (its replies would leave through it) and, unless checking away
// from the gateway, its TLS files load. Listening on every address is a
// warning: the relay belongs on the LAN side.
func checkRelayPlan(c *Config, r *reporter, opts CheckOptions) {
	rl := c.Relay
	if rl == nil {
		return
	}
	if a := rl.ListenAddr.Addr(); a.IsValid() {
		if a.IsUnspecified() {
			r.warnf(relayFieldListen, "%s listens on every address, the WAN side included; use the gateway's LAN address", rl.Listen)
		}
		for _, s := range c.Sites {
			if s.Name == c.Site {
				continue
			}
			for _, p := range append(append([]netip.Prefix{}, s.NodeCIDRs...), s.PodCIDRs...) {
				if p.IsValid() && p.Contains(a) {
					r.errorf(relayFieldListen, "%s is inside %s of site %q, which is routed into the tunnel", a, p, s.Name)
				}
			}
		}
	}
	if rl.TLS == nil || opts.SkipPrivateKey {
		return
	}
	if _, err := LoadRelayTLS(c); err != nil {
		r.errorf(relayFieldTLS, "%v", err)
	}
}

// LoadRelayTLS reads the relay's certificate, key and client CA into a
// server config that requires and verifies client certificates, pins
// clientNames, and reads the files again when they change (a renewed
// certificate applies to new clients without a restart; relay.LoadTLS).
// It returns nil, nil when the relay has no tls section.
func LoadRelayTLS(c *Config) (*tls.Config, error) {
	if c.Relay == nil || c.Relay.TLS == nil {
		return nil, nil
	}
	t := c.Relay.TLS
	return relay.LoadTLS(relay.TLSFiles{
		CertFile: c.RelayPath(t.CertFile), KeyFile: c.RelayPath(t.KeyFile),
		ClientCAFile: c.RelayPath(t.ClientCAFile), ClientNames: t.ClientNames,
	}, func(err error) {
		slog.Warn("relay: TLS files changed but do not load; still serving the last good ones", "err", err)
	})
}
