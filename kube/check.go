package kube

import (
	"bytes"
	"errors"
	"regexp"
	"strconv"
	"strings"

	"github.com/bridgehead/bridgehead/config"
)

// CheckResources validates a file of Site, Gateway and Node objects with
// the same all-or-nothing checks as a config file (config.CheckData):
// it decodes them, converts them to a catalog as seen by the first
// Gateway, checks that catalog, and reports every problem and warning at
// the file, line and field of the object it is about. It returns the
// catalog only when there are no problems.
func CheckResources(file string, data []byte, opts config.CheckOptions) (*config.Config, config.ErrorList, config.ErrorList) {
	r, src, err := Decode(file, data)
	if err != nil {
		var l config.ErrorList
		if errors.As(err, &l) {
			return nil, l, nil
		}
		return nil, config.ErrorList{{File: file, Msg: err.Error()}}, nil
	}
	local, ok := firstGateway(r)
	if !ok {
		return nil, config.ErrorList{{File: file, Line: 1, Msg: "no Gateway of a listed Site: a catalog needs at least one to be checked"}}, nil
	}
	c, err := ToConfig(r, local)
	if err != nil {
		var oe *ObjectError
		if errors.As(err, &oe) {
			return nil, config.ErrorList{{File: file, Line: src.Line(oe.Kind, oe.Name, oe.Field), Field: oe.Kind + " " + oe.Name + ": " + oe.Field, Msg: oe.Msg}}, nil
		}
		return nil, config.ErrorList{{File: file, Msg: err.Error()}}, nil
	}
	c.PrivateKeyFile = "unused.key"
	var buf bytes.Buffer
	if err := WriteCatalog(&buf, c); err != nil {
		return nil, config.ErrorList{{File: file, Msg: err.Error()}}, nil
	}
	opts.SkipPrivateKey = true
	checked, problems, warnings := config.CheckData(file, buf.Bytes(), opts)
	m := newFieldMap(r, c, src)
	return checked, m.translate(problems), m.translate(warnings)
}

// firstGateway is the first Gateway whose Site is listed.
func firstGateway(r *Resources) (Local, bool) {
	sites := map[string]bool{}
	for _, s := range r.Sites {
		sites[s.Name] = true
	}
	for i := range r.Gateways {
		g := &r.Gateways[i]
		if sites[g.Spec.Site] {
			return Local{Site: g.Spec.Site, Gateway: gatewayConfigName(g)}, true
		}
	}
	return Local{}, false
}

// fieldMap turns catalog field paths into objects' fields and lines.
type fieldMap struct {
	src             *Source
	local           Local
	sites           []string   // config site index -> Site name
	gateways, nodes [][]string // [site][i] -> object name
}

func newFieldMap(r *Resources, c *config.Config, src *Source) *fieldMap {
	m := &fieldMap{src: src, local: Local{Site: c.Site, Gateway: c.Gateway}}
	index := map[string]int{}
	for i, s := range c.Sites {
		m.sites = append(m.sites, s.Name)
		index[s.Name] = i
	}
	m.gateways = make([][]string, len(c.Sites))
	m.nodes = make([][]string, len(c.Sites))
	for _, g := range r.Gateways {
		if i, ok := index[g.Spec.Site]; ok {
			m.gateways[i] = append(m.gateways[i], g.Name)
		}
	}
	for _, n := range r.Nodes {
		if i, ok := index[n.Labels[SiteLabel]]; ok {
			m.nodes[i] = append(m.nodes[i], n.Name)
		}
	}
	return m
}

var catalogPath = regexp.MustCompile(`^sites\[(\d+)\](?:\.(gateways|nodes)\[(\d+)\])?(?:\.(.*))?$`)

// Field names that differ between the catalog and the resources.
var (
	siteFields = map[string]string{"name": "metadata.name"}
	gwFields   = map[string]string{"name": "metadata.name"}
	nodeFields = map[string]string{
		"name": "metadata.name", "address": "status.addresses", "address6": "status.addresses",
		"podCIDR": "spec.podCIDRs", "podCIDR6": "spec.podCIDRs",
	}
	relayFields = map[string]string{"listen": "spec.relay.port"}
)

// object is the kind, name and field a catalog path is about, or ok
// false for a path outside the sites (the synthetic local part).
func (m *fieldMap) object(path string) (kind, name, field string, ok bool) {
	if rest, isRelay := strings.CutPrefix(path, "relay."); isRelay || path == "relay" {
		f, mapped := relayFields[rest]
		if !mapped {
			f = "spec.relay." + rest
		}
		return "Site", m.local.Site, strings.TrimSuffix(f, "."), true
	}
	sm := catalogPath.FindStringSubmatch(path)
	if sm == nil {
		return "", "", "", false
	}
	si, _ := strconv.Atoi(sm[1])
	if si >= len(m.sites) {
		return "", "", "", false
	}
	rest := sm[4]
	translate := func(table map[string]string, prefix string) string {
		head, tail, _ := strings.Cut(rest, ".")
		base, idx, _ := strings.Cut(head, "[")
		if idx != "" {
			idx = "[" + idx
		}
		if f, ok := table[base]; ok {
			head = f
			if strings.HasPrefix(f, "spec.") || strings.HasPrefix(f, "metadata.") {
				head += idx
			}
		} else if head != "" {
			head = prefix + head
		}
		if tail != "" {
			return head + "." + tail
		}
		return head
	}
	switch sm[2] {
	case "gateways":
		gi, _ := strconv.Atoi(sm[3])
		if gi < len(m.gateways[si]) {
			return "Gateway", m.gateways[si][gi], translate(gwFields, "spec."), true
		}
	case "nodes":
		ni, _ := strconv.Atoi(sm[3])
		if ni < len(m.nodes[si]) {
			return "Node", m.nodes[si][ni], translate(nodeFields, "spec."), true
		}
	default:
		return "Site", m.sites[si], translate(siteFields, "spec."), true
	}
	return "", "", "", false
}

// msgPath is a catalog path in a message, with the line of the
// rendered catalog that may follow it.
var msgPath = regexp.MustCompile(`(sites\[\d+\](?:\.[A-Za-z0-9]+(?:\[\d+\])?)*)( \(line \d+\)|, line \d+)?`)

// message rewrites the catalog paths a check message names (another
// site's CIDR, the first of two duplicates) as objects and their lines in
// the resource file.
func (m *fieldMap) message(msg string) string {
	return msgPath.ReplaceAllStringFunc(msg, func(s string) string {
		sm := msgPath.FindStringSubmatch(s)
		kind, name, field, ok := m.object(sm[1])
		if !ok {
			return s
		}
		out := kind + " " + name
		if field != "" {
			out += ": " + field
		}
		if l := m.src.Line(kind, name, field); l > 0 {
			out += " (line " + strconv.Itoa(l) + ")"
		}
		return out
	})
}

func (m *fieldMap) translate(l config.ErrorList) config.ErrorList {
	var out config.ErrorList
	for _, e := range l {
		kind, name, field, ok := m.object(e.Field)
		if !ok {
			out = append(out, &config.Error{File: m.src.File, Field: e.Field, Msg: e.Msg})
			continue
		}
		f := kind + " " + name
		if field != "" {
			f += ": " + field
		}
		out = append(out, &config.Error{File: m.src.File, Line: m.src.Line(kind, name, field), Field: f, Msg: m.message(e.Msg)})
	}
	return out
}
