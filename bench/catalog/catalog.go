// Package catalog generates large bridgehead configurations — many sites,
// several gateways each, many prefixes — with real X25519 keys, for the
// scale benchmarks and tests (config, daemon, bench/cmd/bhscale).
//
// The address plan is fixed so that a generated catalog passes
// `bridgehead check`:
//   - site i's node CIDR is the i-th /24 of 172.16.0.0/12 (172.30.0.0/15,
//     which AKS reserves, is skipped), its gateway j has address .(j+1);
//   - pod prefixes are carved in order from 10.0.0.0/8, /25 each unless
//     more are asked for than fit, and spread evenly over the sites;
//   - the service CIDR is 192.168.0.0/16;
//   - gateway endpoints are taken in order from Options.EndpointBase.
//
// Keys are derived from Options.Seed, so the same options give the same
// file. Everything is plain data: a Catalog is safe to read from several
// goroutines and nothing in this package holds state.
package catalog

import (
	"crypto/ecdh"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// Options shape a catalog. Zero values take the defaults noted.
type Options struct {
	Sites    int // default 200
	Gateways int // per site, default 3
	// Prefixes is the total number of pod prefixes over all sites
	// (default 100,000); the node CIDRs (one per site) come on top.
	Prefixes int
	// Seed derives every key (default "bridgehead-catalog").
	Seed string
	// EndpointBase is the address of the first gateway's endpoint; the
	// others follow it in order (default 198.18.0.1, the benchmarking
	// range). Port is the UDP port of every endpoint (default 51820).
	EndpointBase netip.Addr
	Port         uint16
	// Keepalive is every site's keepalive (0: none).
	Keepalive time.Duration
	// Nodes is the number of nodes listed per site (at most 240 and the
	// site's pod prefixes); node k gets the site's k-th pod prefix.
	Nodes int
}

func (o *Options) defaults() {
	if o.Sites == 0 {
		o.Sites = 200
	}
	if o.Gateways == 0 {
		o.Gateways = 3
	}
	if o.Prefixes == 0 {
		o.Prefixes = 100_000
	}
	if o.Seed == "" {
		o.Seed = "bridgehead-catalog"
	}
	if !o.EndpointBase.IsValid() {
		o.EndpointBase = netip.MustParseAddr("198.18.0.1")
	}
	if o.Port == 0 {
		o.Port = 51820
	}
}

// Catalog is a generated address plan with its keys.
type Catalog struct {
	Options Options
	Sites   []Site
}

// Site is one generated site.
type Site struct {
	Name     string
	NodeCIDR netip.Prefix
	Pods     []netip.Prefix
	Gateways []Gateway
	Nodes    []Node
}

// Node is one generated node with its pod range.
type Node struct {
	Name    string
	Address netip.Addr
	PodCIDR netip.Prefix
}

// Gateway is one generated gateway with its key pair (standard base64).
type Gateway struct {
	Name       string
	Address    netip.Addr
	Endpoint   netip.AddrPort
	PrivateKey string
	PublicKey  string
}

// maxSites is how many /24 node CIDRs 172.16.0.0/12 holds below
// 172.30.0.0/15.
const maxSites = 14 * 256

// New generates a catalog.
func New(o Options) (*Catalog, error) {
	o.defaults()
	switch {
	case o.Sites < 1 || o.Sites > maxSites:
		return nil, fmt.Errorf("catalog: %d sites: want 1 to %d", o.Sites, maxSites)
	case o.Gateways < 1 || o.Gateways > 250:
		return nil, fmt.Errorf("catalog: %d gateways per site: want 1 to 250", o.Gateways)
	case o.Prefixes < 0 || o.Prefixes > 1<<22:
		return nil, fmt.Errorf("catalog: %d prefixes: want 0 to %d", o.Prefixes, 1<<22)
	case o.Nodes < 0 || o.Nodes > 240 || o.Nodes > o.Prefixes/o.Sites:
		return nil, fmt.Errorf("catalog: %d nodes per site: want 0 to 240 and at most the %d pod prefixes of a site", o.Nodes, o.Prefixes/o.Sites)
	}
	// The longest prefix length, at least /25, such that every prefix
	// fits in 10.0.0.0/8.
	bits := 25
	for 1<<(bits-8) < o.Prefixes {
		bits++
	}
	c := &Catalog{Options: o, Sites: make([]Site, o.Sites)}
	ep := o.EndpointBase
	pod := uint32(10 << 24)
	for i := range c.Sites {
		s := &c.Sites[i]
		s.Name = fmt.Sprintf("site-%03d", i)
		s.NodeCIDR = netip.PrefixFrom(addr4(172<<24|16<<16+uint32(i)<<8), 24)
		n := o.Prefixes / o.Sites
		if i < o.Prefixes%o.Sites {
			n++
		}
		s.Pods = make([]netip.Prefix, n)
		for k := range s.Pods {
			s.Pods[k] = netip.PrefixFrom(addr4(pod), bits)
			pod += 1 << (32 - bits)
		}
		s.Nodes = make([]Node, o.Nodes)
		for k := range s.Nodes {
			s.Nodes[k] = Node{Name: fmt.Sprintf("node-%d", k),
				Address: addr4(172<<24 | 16<<16 + uint32(i)<<8 + 10 + uint32(k)), PodCIDR: s.Pods[k]}
		}
		s.Gateways = make([]Gateway, o.Gateways)
		for j := range s.Gateways {
			g := &s.Gateways[j]
			g.Name = fmt.Sprintf("gw-%d", j+1)
			g.Address = netip.PrefixFrom(s.NodeCIDR.Addr(), 24).Addr()
			for range j + 1 {
				g.Address = g.Address.Next()
			}
			if !ep.IsValid() {
				return nil, errors.New("catalog: endpoint addresses ran out")
			}
			g.Endpoint = netip.AddrPortFrom(ep, o.Port)
			ep = ep.Next()
			var err error
			g.PrivateKey, g.PublicKey, err = deriveKey(o.Seed, i, j)
			if err != nil {
				return nil, err
			}
		}
	}
	return c, nil
}

func addr4(v uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], v)
	return netip.AddrFrom4(b)
}

// deriveKey makes gateway j of site i's X25519 key pair from the seed.
func deriveKey(seed string, i, j int) (priv, pub string, err error) {
	sum := sha256.Sum256(fmt.Appendf(nil, "%s/%d/%d", seed, i, j))
	k, err := ecdh.X25519().NewPrivateKey(sum[:])
	if err != nil {
		return "", "", fmt.Errorf("catalog: key %d/%d: %w", i, j, err)
	}
	return base64.StdEncoding.EncodeToString(sum[:]), base64.StdEncoding.EncodeToString(k.PublicKey().Bytes()), nil
}

// PrefixCount is the number of prefixes the file routes: pod prefixes and
// one node CIDR per site.
func (c *Catalog) PrefixCount() int {
	n := len(c.Sites)
	for _, s := range c.Sites {
		n += len(s.Pods)
	}
	return n
}

// Local picks the gateway a config file is written for.
type Local struct {
	Site, Gateway int
	// KeyFile is the privateKeyFile value (default "<gateway>.key").
	KeyFile string
	// Listen is the listen address (default 0.0.0.0 and the gateway's
	// endpoint port).
	Listen string
	// ControlSocket, MetricsListen and Interface are written when set.
	ControlSocket, MetricsListen, Interface string
}

// YAML renders the config file of gateway l.
func (c *Catalog) YAML(l Local) ([]byte, error) {
	if l.Site < 0 || l.Site >= len(c.Sites) || l.Gateway < 0 || l.Gateway >= c.Options.Gateways {
		return nil, fmt.Errorf("catalog: no gateway %d of site %d", l.Gateway, l.Site)
	}
	s, g := c.Sites[l.Site], c.Sites[l.Site].Gateways[l.Gateway]
	if l.KeyFile == "" {
		l.KeyFile = s.Name + "-" + g.Name + ".key"
	}
	if l.Listen == "" {
		l.Listen = fmt.Sprintf("0.0.0.0:%d", g.Endpoint.Port())
	}
	var b strings.Builder
	b.Grow(64 + c.PrefixCount()*24 + len(c.Sites)*c.Options.Gateways*200)
	fmt.Fprintf(&b, "# Generated by bench/catalog: %d sites x %d gateways, %d prefixes.\n",
		len(c.Sites), c.Options.Gateways, c.PrefixCount())
	fmt.Fprintf(&b, "site: %s\ngateway: %s\nprivateKeyFile: %s\nlisten: %s\n", s.Name, g.Name, l.KeyFile, l.Listen)
	if l.Interface != "" {
		fmt.Fprintf(&b, "interface:\n  name: %s\n", l.Interface)
	}
	if l.ControlSocket != "" {
		fmt.Fprintf(&b, "controlSocket: %s\n", l.ControlSocket)
	}
	if l.MetricsListen != "" {
		fmt.Fprintf(&b, "metrics:\n  listen: %s\n", l.MetricsListen)
	}
	b.WriteString("cluster:\n  name: scale\n  serviceCIDRs: [192.168.0.0/16]\n  dnsServiceIP: 192.168.0.10\nsites:\n")
	for _, s := range c.Sites {
		fmt.Fprintf(&b, "  - name: %s\n    nodeCIDRs: [%s]\n", s.Name, s.NodeCIDR)
		if c.Options.Keepalive > 0 {
			fmt.Fprintf(&b, "    keepalive: %s\n", c.Options.Keepalive)
		}
		if len(s.Pods) > 0 {
			b.WriteString("    podCIDRs:\n")
			for _, p := range s.Pods {
				b.WriteString("      - ")
				b.WriteString(p.String())
				b.WriteByte('\n')
			}
		}
		b.WriteString("    gateways:\n")
		for _, g := range s.Gateways {
			fmt.Fprintf(&b, "      - name: %s\n        address: %s\n        endpoint: %s\n        publicKey: %s\n",
				g.Name, g.Address, g.Endpoint, g.PublicKey)
		}
		if len(s.Nodes) > 0 {
			b.WriteString("    nodes:\n")
			for _, n := range s.Nodes {
				fmt.Fprintf(&b, "      - {name: %s, address: %s, podCIDR: %s}\n", n.Name, n.Address, n.PodCIDR)
			}
		}
	}
	return []byte(b.String()), nil
}

// Write writes gateway l's config file to dir/name and its private key
// file (mode 0600) next to it, and returns the config's path.
func (c *Catalog) Write(dir, name string, l Local) (string, error) {
	data, err := c.YAML(l)
	if err != nil {
		return "", err
	}
	g := c.Sites[l.Site].Gateways[l.Gateway]
	key := l.KeyFile
	if key == "" {
		key = c.Sites[l.Site].Name + "-" + g.Name + ".key"
	}
	if !filepath.IsAbs(key) {
		key = filepath.Join(dir, key)
	}
	if err := os.WriteFile(key, []byte(g.PrivateKey+"\n"), 0o600); err != nil {
		return "", err
	}
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return "", err
	}
	return path, nil
}
