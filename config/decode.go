package config

import (
	"fmt"
	"net/netip"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/router/fq"
)

// decoder walks a yaml.Node tree into a Config. yaml.v3's own struct
// decoding is not used: it stops at the first type error and cannot
// report the line of a value inside a list, so every value is checked
// here and every problem is recorded with its line and field path.
type decoder struct {
	reporter
}

// maxAliasDepth bounds alias chains (an alias to an alias ...).
const maxAliasDepth = 16

// deref follows aliases; it returns nil for a broken chain.
func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode; i++ {
		if i == maxAliasDepth {
			return nil
		}
		n = n.Alias
	}
	return n
}

func isNull(n *yaml.Node) bool {
	return n == nil || n.Kind == 0 || (n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null")
}

func kindName(n *yaml.Node) string {
	if n == nil {
		return "nothing"
	}
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		if isNull(n) {
			return "null"
		}
		return fmt.Sprintf("%q", n.Value)
	case yaml.DocumentNode:
		return "a document"
	}
	return "an unsupported value"
}

// field is one known key of a mapping and the function that decodes its
// value. The function is not called for a null value (an absent field).
type field struct {
	name   string
	decode func(n *yaml.Node, path string)
}

// mapping decodes n as a mapping with the given known keys. Unknown and
// duplicate keys are reported.
func (d *decoder) mapping(n *yaml.Node, path string, fields []field) {
	v := deref(n)
	if isNull(v) {
		return
	}
	if v.Kind != yaml.MappingNode {
		d.errorAt(n.Line, path, "want a mapping, got %s", kindName(v))
		return
	}
	seen := make(map[string]int, len(fields))
	for i := 0; i+1 < len(v.Content); i += 2 {
		k, val := v.Content[i], v.Content[i+1]
		kd := deref(k)
		if kd == nil || kd.Kind != yaml.ScalarNode {
			d.errorAt(k.Line, path, "field names must be strings, got %s", kindName(kd))
			continue
		}
		name := kd.Value
		fp := joinPath(path, name)
		if kd.ShortTag() == "!!merge" {
			d.errorAt(k.Line, fp, "merge keys (<<) are not supported")
			continue
		}
		f := findField(fields, name)
		if f == nil {
			d.errorAt(k.Line, fp, "unknown field%s", suggest(name, fields))
			continue
		}
		if first, dup := seen[name]; dup {
			d.errorAt(k.Line, fp, "duplicate field (first set on line %d)", first)
			continue
		}
		seen[name] = k.Line
		d.lines[fp] = k.Line
		if isNull(deref(val)) {
			continue
		}
		f.decode(val, fp)
	}
}

func findField(fields []field, name string) *field {
	for i := range fields {
		if fields[i].name == name {
			return &fields[i]
		}
	}
	return nil
}

// suggest returns ` (did you mean "x"?)` for the known field closest to
// name, or "" when none is close.
func suggest(name string, fields []field) string {
	best, bestDist := "", 3
	names := make([]string, 0, len(fields))
	for _, f := range fields {
		names = append(names, f.name)
	}
	sort.Strings(names)
	for _, f := range names {
		if strings.EqualFold(f, name) {
			return fmt.Sprintf(" (did you mean %q?)", f)
		}
		if dist := editDistance(strings.ToLower(f), strings.ToLower(name)); dist < bestDist {
			best, bestDist = f, dist
		}
	}
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return 64
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// sequence decodes n as a list, calling item for each element with its
// path ("sites[2]"). A null element is reported, not passed on.
func (d *decoder) sequence(n *yaml.Node, path string, item func(n *yaml.Node, path string)) {
	v := deref(n)
	if isNull(v) {
		return
	}
	if v.Kind != yaml.SequenceNode {
		d.errorAt(n.Line, path, "want a list, got %s", kindName(v))
		return
	}
	for i, it := range v.Content {
		ip := indexPath(path, i)
		d.lines[ip] = it.Line
		item(it, ip)
	}
}

// scalar returns the text of a single value.
func (d *decoder) scalar(n *yaml.Node, path string) (string, bool) {
	v := deref(n)
	if v == nil || v.Kind != yaml.ScalarNode || isNull(v) {
		d.errorAt(n.Line, path, "want a single value, got %s", kindName(v))
		return "", false
	}
	return v.Value, true
}

func (d *decoder) str(dst *string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		if s, ok := d.scalar(n, path); ok {
			*dst = s
		}
	}
}

// strs decodes a list of strings.
func (d *decoder) strs(dst *[]string) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		d.sequence(n, path, func(n *yaml.Node, path string) {
			s, _ := d.scalar(n, path)
			*dst = append(*dst, s)
		})
	}
}

func (d *decoder) boolPtr(dst **bool) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		v := deref(n)
		if v.ShortTag() != "!!bool" {
			d.errorAt(n.Line, path, "%q is not true or false", s)
			return
		}
		b := strings.EqualFold(s, "true")
		*dst = &b
	}
}

func (d *decoder) parsePrefix(n *yaml.Node, path string) netip.Prefix {
	s, ok := d.scalar(n, path)
	if !ok {
		return netip.Prefix{}
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		d.errorAt(n.Line, path, "%q is not a CIDR", s)
		return netip.Prefix{}
	}
	return p
}

func (d *decoder) prefix(dst *netip.Prefix) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) { *dst = d.parsePrefix(n, path) }
}

// prefixes decodes a list of CIDRs. A bad entry is kept as the zero
// Prefix so that indexes in the slice match indexes in the file.
func (d *decoder) prefixes(dst *[]netip.Prefix) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		d.sequence(n, path, func(n *yaml.Node, path string) {
			*dst = append(*dst, d.parsePrefix(n, path))
		})
	}
}

func (d *decoder) addr(dst *netip.Addr) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			d.errorAt(n.Line, path, "%q is not an IP address", s)
			return
		}
		*dst = a.Unmap()
	}
}

// addrs decodes a list of IP addresses. A bad entry is kept as the zero
// Addr so that indexes in the slice match indexes in the file.
func (d *decoder) addrs(dst *[]netip.Addr) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		d.sequence(n, path, func(n *yaml.Node, path string) {
			var a netip.Addr
			d.addr(&a)(n, path)
			*dst = append(*dst, a)
		})
	}
}

func (d *decoder) duration(dst *time.Duration) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		v, err := time.ParseDuration(s)
		if err != nil {
			d.errorAt(n.Line, path, "%q is not a duration (want e.g. 25s)", s)
			return
		}
		if v < 0 {
			d.errorAt(n.Line, path, "%q is negative", s)
			return
		}
		*dst = v
	}
}

// durationRange is duration within lo..hi.
func (d *decoder) durationRange(dst *time.Duration, lo, hi time.Duration) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		var v time.Duration
		before := len(d.errs)
		d.duration(&v)(n, path)
		if len(d.errs) != before {
			return
		}
		if v < lo || v > hi {
			d.errorAt(n.Line, path, "%v is out of range %v..%v", v, lo, hi)
			return
		}
		*dst = v
	}
}

// intRange decodes an integer between lo and hi.
func (d *decoder) intRange(dst *int, lo, hi int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		v, err := strconv.ParseInt(s, 0, 32)
		if deref(n).ShortTag() != "!!int" || err != nil {
			d.errorAt(n.Line, path, "%q is not a number", s)
			return
		}
		if v < int64(lo) || v > int64(hi) {
			d.errorAt(n.Line, path, "%d is out of range %d..%d", v, lo, hi)
			return
		}
		*dst = int(v)
	}
}

// intPtrRange is intRange for a setting whose absence means its default.
func (d *decoder) intPtrRange(dst **int, lo, hi int) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		v := -1
		d.intRange(&v, lo, hi)(n, path)
		if v >= lo && v <= hi {
			*dst = &v
		}
	}
}

func (d *decoder) mtu(dst *MTU) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		s, ok := d.scalar(n, path)
		if !ok {
			return
		}
		if s == "auto" {
			*dst = MTU{Auto: true}
			return
		}
		v, err := strconv.ParseInt(s, 0, 32)
		if deref(n).ShortTag() != "!!int" || err != nil {
			d.errorAt(n.Line, path, "%q is not a number or \"auto\"", s)
			return
		}
		if v < minMTU || v > maxMTU {
			d.errorAt(n.Line, path, "%d is out of range %d..%d", v, minMTU, maxMTU)
			return
		}
		*dst = MTU{Value: int(v)}
	}
}

// Limits of Interface.MTU.
const (
	minMTU = 576
	maxMTU = 65535
)

func (d *decoder) config(n *yaml.Node, c *Config) {
	d.mapping(n, "", []field{
		{"site", d.str(&c.Site)},
		{"gateway", d.str(&c.Gateway)},
		{"privateKeyFile", d.str(&c.PrivateKeyFile)},
		{"previousPrivateKeyFile", d.str(&c.PreviousPrivateKeyFile)},
		{"keyOverlap", d.durationRange(&c.KeyOverlap, MinKeyOverlap, MaxKeyOverlap)},
		{"presharedKeys", d.presharedKeys(&c.PresharedKeys)},
		{"listen", d.str(&c.Listen)},
		{"cipher", d.str(&c.Cipher)},
		{"interface", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"name", d.str(&c.Interface.Name)},
				{"mtu", d.mtu(&c.Interface.MTU)},
				{"offload", d.boolPtr(&c.Interface.Offload)},
			})
		}},
		{"cluster", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"name", d.str(&c.Cluster.Name)},
				{"serviceCIDRs", d.prefixes(&c.Cluster.ServiceCIDRs)},
				{"dnsServiceIP", d.addr(&c.Cluster.DNSServiceIP)},
			})
		}},
		{"metrics", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"listen", d.str(&c.Metrics.Listen)},
				{"readyWindow", d.duration(&c.Metrics.ReadyWindow)},
			})
		}},
		{"controlSocket", d.str(&c.ControlSocket)},
		{"clampMSS", d.boolPtr(&c.ClampMSS)},
		{"earlyDrop", d.boolPtr(&c.EarlyDrop)},
		{"lanes", d.intRange(&c.Lanes, 1, MaxLanes)},
		{"express", d.boolPtr(&c.Express)},
		{"expressPriority", d.intPtrRange(&c.ExpressPriority, 0, 99)},
		{"codel", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"target", d.durationRange(&c.CoDel.Target, MinCoDelTarget, MaxCoDelTarget)},
				{"interval", d.durationRange(&c.CoDel.Interval, MinCoDelInterval, MaxCoDelInterval)},
			})
			t, i := c.CoDel.Target, c.CoDel.Interval
			if t == 0 {
				t = fq.DefaultTarget
			}
			if i == 0 {
				i = fq.DefaultInterval
			}
			if t >= i {
				d.errorAt(n.Line, path, "target %v is not below interval %v", t, i)
			}
		}},
		{"relay", func(n *yaml.Node, path string) { d.relay(n, path, c) }},
		{"lan", func(n *yaml.Node, path string) {
			c.LAN = &LAN{}
			d.mapping(n, path, []field{
				{"interface", d.str(&c.LAN.Interface)},
				{"targets", d.addrs(&c.LAN.Targets)},
				{"targetTimeout", d.duration(&c.LAN.TargetTimeout)},
			})
		}},
		{"drain", func(n *yaml.Node, path string) {
			d.mapping(n, path, []field{
				{"timeout", d.durationRange(&c.Drain.Timeout, MinDrainTimeout, MaxDrainTimeout)},
				{"quiet", d.durationRange(&c.Drain.Quiet, MinDrainQuiet, MaxDrainTimeout)},
			})
			if q, t := c.DrainQuiet(), c.DrainTimeout(); q > t {
				d.errorAt(n.Line, path, "quiet %v is longer than timeout %v", q, t)
			}
		}},
		{"kubernetes", func(n *yaml.Node, path string) { d.kubernetes(n, path, c) }},
		{"sites", func(n *yaml.Node, path string) { d.sites(n, path, c) }},
	})
}

// sites decodes the sites list, of the config file or of its followed
// catalog (readCatalog).
func (d *decoder) sites(n *yaml.Node, path string, c *Config) {
	d.sequence(n, path, func(n *yaml.Node, path string) {
		var s Site
		d.site(n, path, &s)
		c.Sites = append(c.Sites, s)
	})
}

func (d *decoder) site(n *yaml.Node, path string, s *Site) {
	if isNull(deref(n)) {
		d.errorAt(n.Line, path, "empty site")
		return
	}
	d.mapping(n, path, []field{
		{"name", d.str(&s.Name)},
		{"nodeCIDRs", d.prefixes(&s.NodeCIDRs)},
		{"podCIDRs", d.prefixes(&s.PodCIDRs)},
		{"routerAddress", d.addr(&s.RouterAddress)},
		{"routerAddress6", d.addr(&s.RouterAddress6)},
		{"keepalive", d.duration(&s.Keepalive)},
		{"probeInterval", d.duration(&s.ProbeInterval)},
		{"via", d.strs(&s.Via)},
		{"allowedSources", d.siteSources(&s.AllowedSources)},
		{"gateways", func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string) {
				var g Gateway
				if isNull(deref(n)) {
					d.errorAt(n.Line, path, "empty gateway")
				}
				d.mapping(n, path, []field{
					{"name", d.str(&g.Name)},
					{"address", d.addr(&g.Address)},
					{"address6", d.addr(&g.Address6)},
					{"endpoint", d.str(&g.Endpoint)},
					{"publicKey", d.str(&g.PublicKey)},
					{"previousPublicKey", d.str(&g.PreviousPublicKey)},
					{"previousKeyExpires", d.time(&g.PreviousKeyExpires)},
				})
				s.Gateways = append(s.Gateways, g)
			})
		}},
		{"nodes", func(n *yaml.Node, path string) {
			d.sequence(n, path, func(n *yaml.Node, path string) {
				var nd Node
				if isNull(deref(n)) {
					d.errorAt(n.Line, path, "empty node")
				}
				d.mapping(n, path, []field{
					{"name", d.str(&nd.Name)},
					{"address", d.addr(&nd.Address)},
					{"podCIDR", d.prefix(&nd.PodCIDR)},
					{"address6", d.addr(&nd.Address6)},
					{"podCIDR6", d.prefix(&nd.PodCIDR6)},
				})
				s.Nodes = append(s.Nodes, nd)
			})
		}},
	})
}
