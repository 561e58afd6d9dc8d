package kube

import (
	"bytes"
	"errors"
	"net"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bridgehead/bridgehead/config"
)

// PlanProblem is a problem CheckPlan found: the object and field it is
// about (in resource terms), and the Site it belongs to ("" when it
// belongs to none, such as a synthetic part of the catalog).
type PlanProblem struct {
	Site              string
	Kind, Name, Field string
	Msg               string
}

func (p PlanProblem) String() string {
	s := p.Msg
	if p.Field != "" {
		s = p.Field + ": " + s
	}
	if p.Kind != "" {
		s = p.Kind + " " + p.Name + ": " + s
	}
	return s
}

// CheckPlan checks resources already in memory (a controller's caches)
// with the checks of CheckResources (`bridgehead check`), and returns
// their catalog (as ToConfig makes it for their first Gateway: no
// defaults filled in, endpoints unresolved) when there is no problem. Each problem names its object and field and the Site it
// belongs to; warnings are counted. A Site without any Gateway in r is a
// problem of that Site.
//
// The sites and gateways go through config.CheckData as catalog text,
// every rule of a config file included; the nodes, already typed values,
// are then added to the parsed catalog and the whole goes through
// config.Check, the rules CheckData runs after parsing. Gateway endpoint
// hostnames are not looked up (see unresolved). Writing 10,000
// nodes as YAML to parse them back would cost seconds and check nothing
// more.
func CheckPlan(r *Resources) (c *config.Config, problems []PlanProblem, warnings int) {
	local, ok := firstGateway(r)
	if !ok {
		for _, s := range r.Sites {
			problems = append(problems, PlanProblem{Site: s.Name, Kind: "Site", Name: s.Name, Msg: "no Gateway has spec.site " + strconv.Quote(s.Name)})
		}
		return nil, problems, 0
	}
	full, err := ToConfig(r, local)
	if err != nil {
		var oe *ObjectError
		if !errors.As(err, &oe) {
			return nil, []PlanProblem{{Msg: err.Error()}}, 0
		}
		return nil, []PlanProblem{{Site: siteOf(r, oe.Kind, oe.Name), Kind: oe.Kind, Name: oe.Name, Field: oe.Field, Msg: oe.Msg}}, 0
	}
	m := newFieldMap(r, full, nil)
	translate := func(l config.ErrorList) []PlanProblem {
		var out []PlanProblem
		for _, e := range l {
			kind, name, field, ok := m.object(e.Field)
			if !ok {
				out = append(out, PlanProblem{Field: e.Field, Msg: e.Msg})
				continue
			}
			out = append(out, PlanProblem{Site: siteOf(r, kind, name), Kind: kind, Name: name, Field: field, Msg: m.message(e.Msg)})
		}
		return out
	}
	bare := *full
	bare.Sites = make([]config.Site, len(full.Sites))
	for i, s := range full.Sites {
		bare.Sites[i] = s
		bare.Sites[i].Nodes = nil
		bare.Sites[i].Gateways = slices.Clone(s.Gateways)
		for j := range bare.Sites[i].Gateways {
			g := &bare.Sites[i].Gateways[j]
			g.Endpoint = unresolved(g.Endpoint)
		}
	}
	bare.PrivateKeyFile = "unused.key"
	var buf bytes.Buffer
	if err := WriteCatalog(&buf, &bare); err != nil {
		return nil, []PlanProblem{{Msg: err.Error()}}, 0
	}
	opts := config.CheckOptions{SkipPrivateKey: true}
	parsed, probs, _ := config.CheckData("<cluster>", buf.Bytes(), opts)
	if len(probs) > 0 {
		return nil, translate(probs), 0
	}
	for i := range parsed.Sites {
		parsed.Sites[i].Nodes = full.Sites[i].Nodes
	}
	probs, warns := config.Check(parsed, opts)
	if len(probs) > 0 {
		return nil, translate(probs), len(warns)
	}
	return full, nil, len(warns)
}

// unresolved is endpoint with a hostname replaced by 0.0.0.0: the
// gateways resolve hostnames when they load the catalog, and a lookup
// failing in the controller must not take a site out of every gateway's
// catalog. Anything else is left for the check to judge.
func unresolved(endpoint string) string {
	host, port, err := net.SplitHostPort(endpoint)
	if err != nil {
		return endpoint
	}
	if _, err := netip.ParseAddr(host); err == nil {
		return endpoint
	}
	if len(validation.IsDNS1123Subdomain(strings.ToLower(host))) > 0 {
		return endpoint
	}
	return net.JoinHostPort("0.0.0.0", port)
}

// siteOf is the Site an object of r belongs to.
func siteOf(r *Resources, kind, name string) string {
	switch kind {
	case "Site":
		return name
	case "Gateway":
		for i := range r.Gateways {
			if r.Gateways[i].Name == name {
				return r.Gateways[i].Spec.Site
			}
		}
	case "Node":
		for i := range r.Nodes {
			if r.Nodes[i].Name == name {
				return r.Nodes[i].Labels[SiteLabel]
			}
		}
	}
	return ""
}
