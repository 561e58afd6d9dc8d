package config

import (
	"slices"
	"strconv"
	"strings"
)

// CheckNode is Check scoped to what the node agent of node installs from
// a catalog, so that a bad entry of another node or site does not stop
// the agent's updates. Check's rules run unchanged over the whole
// catalog; each problem is then sorted by the entry its field names:
//
//   - refused whole (problems): anything of the node's own site (the
//     site listing a node named node; its CIDRs, gateways and router
//     addresses are the node's next hops), the node's own entry (or any
//     entry with its name), the node and pod CIDRs of every other site
//     (the aggregates the node routes toward its gateways and keeps
//     unmasqueraded), cluster.* (the service CIDRs), and whatever lies
//     outside sites;
//   - skipped: another node's entry (the node's own site's included:
//     the node would route that node's pod block, so the entry is left
//     out of kept), and everything else of another site (its gateways,
//     router addresses, nodes, hubs, policy), which the node does not
//     install.
//
// kept is c without the node entries skipped (c is not changed), nil
// when problems is not empty. Gateways use Check: a gateway refuses a bad
// catalog whole.
func CheckNode(c *Config, node string, opts CheckOptions) (kept *Config, problems, skipped ErrorList) {
	all, _ := Check(c, opts)
	if len(all) == 0 {
		return c, nil, nil
	}
	if c == nil {
		return nil, all, nil
	}
	own := -1 // the node's site, as nodeagent.FromConfig finds it: the last listing it
	for i, s := range c.Sites {
		for _, n := range s.Nodes {
			if n.Name == node {
				own = i
			}
		}
	}
	drop := map[int]map[int]bool{} // site -> node indexes left out
	for _, p := range all {
		site, n, ok := elsewhere(c, p.Field, own, node)
		if !ok {
			problems = append(problems, p)
			continue
		}
		skipped = append(skipped, p)
		if n >= 0 {
			if drop[site] == nil {
				drop[site] = map[int]bool{}
			}
			drop[site][n] = true
		}
	}
	if len(problems) > 0 {
		return nil, problems, skipped
	}
	k := *c
	k.Sites = slices.Clone(c.Sites)
	for i, left := range drop {
		var nodes []Node
		for j, n := range c.Sites[i].Nodes {
			if !left[j] {
				nodes = append(nodes, n)
			}
		}
		k.Sites[i].Nodes = nodes
	}
	return &k, nil, skipped
}

// elsewhere reports whether the problem at field concerns only what the
// agent of node (in site own, -1 if no site lists it) does not install,
// and the entry it names: site, and node (-1 when not a node's entry).
func elsewhere(c *Config, field string, own int, node string) (site, n int, ok bool) {
	site, rest, ok := indexedField(field, "sites")
	if !ok || site >= len(c.Sites) {
		return -1, -1, false // cluster.*, or not a site's: everyone's
	}
	if j, _, isNode := indexedField(rest, ".nodes"); isNode {
		if j >= len(c.Sites[site].Nodes) || c.Sites[site].Nodes[j].Name == node {
			return -1, -1, false
		}
		return site, j, true
	}
	if site == own {
		return -1, -1, false
	}
	if strings.HasPrefix(rest, ".nodeCIDRs[") || strings.HasPrefix(rest, ".podCIDRs[") {
		return -1, -1, false // an aggregate the node routes
	}
	// The site's gateways, router addresses, hubs, policy, probe
	// interval; or its podCIDRs as a whole ("missing" for its nodes'
	// blocks): the other site's gateways act on them, the node does not.
	return site, -1, true
}

// indexedField splits "NAME[i]REST" into i and REST.
func indexedField(field, name string) (int, string, bool) {
	rest, ok := strings.CutPrefix(field, name+"[")
	if !ok {
		return 0, "", false
	}
	end := strings.IndexByte(rest, ']')
	if end < 0 {
		return 0, "", false
	}
	i, err := strconv.Atoi(rest[:end])
	if err != nil || i < 0 {
		return 0, "", false
	}
	return i, rest[end+1:], true
}
