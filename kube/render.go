package kube

import (
	"bytes"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
)

// WriteCatalog writes c's catalog as config-file YAML: site, gateway and
// privateKeyFile when set, the relay when set, and the sites with their
// gateways and nodes. config.Parse reads it back to the same sites.
func WriteCatalog(w io.Writer, c *config.Config) error {
	root := mapping()
	for _, kv := range [][2]string{{"site", c.Site}, {"gateway", c.Gateway}, {"privateKeyFile", c.PrivateKeyFile}} {
		if kv[1] != "" {
			add(root, kv[0], str(kv[1]))
		}
	}
	if rl := c.Relay; rl != nil {
		r := mapping()
		add(r, "listen", str(rl.Listen))
		if len(rl.AllowedPorts) > 0 {
			ports := seq()
			for _, p := range rl.AllowedPorts {
				ports.Content = append(ports.Content, scalar("!!int", strconv.Itoa(p)))
			}
			add(r, "allowedPorts", ports)
		}
		if rl.AllowPodCIDRs {
			add(r, "allowPodCIDRs", scalar("!!bool", "true"))
		}
		if t := rl.TLS; t != nil {
			tls := mapping()
			add(tls, "certFile", str(t.CertFile))
			add(tls, "keyFile", str(t.KeyFile))
			add(tls, "clientCAFile", str(t.ClientCAFile))
			add(r, "tls", tls)
		}
		addInt(r, "maxConnections", rl.MaxConnections)
		addInt(r, "maxConnectionsPerDestination", rl.MaxConnectionsPerDestination)
		addDuration(r, "idleTimeout", rl.IdleTimeout)
		addDuration(r, "headerTimeout", rl.HeaderTimeout)
		add(root, "relay", r)
	}
	sites := seq()
	for _, s := range c.Sites {
		m := mapping()
		add(m, "name", str(s.Name))
		addPrefixes(m, "nodeCIDRs", s.NodeCIDRs)
		addPrefixes(m, "podCIDRs", s.PodCIDRs)
		addAddr(m, "routerAddress", s.RouterAddress)
		addAddr(m, "routerAddress6", s.RouterAddress6)
		addDuration(m, "keepalive", s.Keepalive)
		addDuration(m, "probeInterval", s.ProbeInterval)
		if s.AllowedSources != nil { // absent: every site; [] written: none (allowedSources)
			list := seq()
			for _, name := range s.AllowedSources {
				list.Content = append(list.Content, str(name))
			}
			add(m, "allowedSources", list)
		}
		if len(s.Gateways) > 0 {
			gws := seq()
			for _, g := range s.Gateways {
				gm := mapping()
				add(gm, "name", str(g.Name))
				addAddr(gm, "address", g.Address)
				addAddr(gm, "address6", g.Address6)
				if g.Endpoint != "" {
					add(gm, "endpoint", str(g.Endpoint))
				}
				if g.PublicKey != "" {
					add(gm, "publicKey", str(g.PublicKey))
				}
				if g.PreviousPublicKey != "" { // a key rollover (keys.go)
					add(gm, "previousPublicKey", str(g.PreviousPublicKey))
					add(gm, "previousKeyExpires", str(g.PreviousKeyExpires.UTC().Format(time.RFC3339)))
				}
				gws.Content = append(gws.Content, gm)
			}
			add(m, "gateways", gws)
		}
		if len(s.Nodes) > 0 {
			nodes := seq()
			for _, n := range s.Nodes {
				nm := mapping()
				nm.Style = yaml.FlowStyle
				add(nm, "name", str(n.Name))
				addAddr(nm, "address", n.Address)
				addPrefix(nm, "podCIDR", n.PodCIDR)
				addAddr(nm, "address6", n.Address6)
				addPrefix(nm, "podCIDR6", n.PodCIDR6)
				nodes.Content = append(nodes.Content, nm)
			}
			add(m, "nodes", nodes)
		}
		sites.Content = append(sites.Content, m)
	}
	add(root, "sites", sites)
	enc := yaml.NewEncoder(w)
	enc.SetIndent(2)
	if err := enc.Encode(root); err != nil {
		return fmt.Errorf("write catalog: %w", err)
	}
	return enc.Close()
}

func mapping() *yaml.Node { return &yaml.Node{Kind: yaml.MappingNode} }
func seq() *yaml.Node     { return &yaml.Node{Kind: yaml.SequenceNode} }
func str(s string) *yaml.Node {
	return &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: s}
}
func scalar(tag, v string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: v} }

func add(m *yaml.Node, key string, v *yaml.Node) {
	m.Content = append(m.Content, str(key), v)
}

func addInt(m *yaml.Node, key string, v int) {
	if v != 0 {
		add(m, key, scalar("!!int", strconv.Itoa(v)))
	}
}

func addDuration(m *yaml.Node, key string, d time.Duration) {
	if d != 0 {
		add(m, key, str(d.String()))
	}
}

func addAddr(m *yaml.Node, key string, a netip.Addr) {
	if a.IsValid() {
		add(m, key, str(a.String()))
	}
}

func addPrefix(m *yaml.Node, key string, p netip.Prefix) {
	if p.IsValid() {
		add(m, key, str(p.String()))
	}
}

func addPrefixes(m *yaml.Node, key string, ps []netip.Prefix) {
	if len(ps) == 0 {
		return
	}
	s := seq()
	for _, p := range ps {
		s.Content = append(s.Content, str(p.String()))
	}
	add(m, key, s)
}

// MergeCatalog returns the config file base with its sites and relay
// replaced by c's (a relay absent from c is removed), keeping every other
// key, its order and comments.
func MergeCatalog(base []byte, c *config.Config) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(base, &doc); err != nil {
		return nil, fmt.Errorf("merge catalog: %w", err)
	}
	if len(doc.Content) == 0 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("merge catalog: the base config is not a mapping")
	}
	var buf bytes.Buffer
	if err := WriteCatalog(&buf, &config.Config{Relay: c.Relay, Sites: c.Sites}); err != nil {
		return nil, err
	}
	var cat yaml.Node
	if err := yaml.Unmarshal(buf.Bytes(), &cat); err != nil {
		return nil, fmt.Errorf("merge catalog: %w", err)
	}
	root, from := doc.Content[0], cat.Content[0]
	for _, key := range []string{"relay", "sites"} {
		v := field(from, key)
		i := keyIndex(root, key)
		switch {
		case v == nil && i >= 0:
			root.Content = append(root.Content[:i], root.Content[i+2:]...)
		case v != nil && i >= 0:
			root.Content[i+1] = v
		case v != nil:
			add(root, key, v)
		}
	}
	buf.Reset()
	enc := yaml.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("merge catalog: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func keyIndex(m *yaml.Node, key string) int {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return i
		}
	}
	return -1
}
