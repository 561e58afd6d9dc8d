package config

import "gopkg.in/yaml.v3"

// ParseSites parses a catalog file alone: the `sites:` a followed catalog
// file holds (kubernetes.catalogFile), as the node agent reads it. A node
// has no gateway of its own, so there is no site or gateway to name and
// no key: the Config holds the sites (and defaults), and Check applies
// every rule about the address plan to them. A relay section, which the
// follower writes for a gateway, is accepted and ignored. Problems name
// path and line, as Parse's do.
func ParseSites(path string, data []byte) (*Config, error) {
	c, d, root, ok := startDecode(path, data)
	if !ok {
		return nil, d.errs.sorted()
	}
	d.mapping(root, "", []field{
		{"sites", func(n *yaml.Node, path string) { d.sites(n, path, c) }},
		{"relay", func(*yaml.Node, string) {}},
	})
	if c.Sites == nil {
		d.errorAt(root.Line, "sites", "the catalog lists no sites")
	}
	c.lines = d.lines
	applyDefaults(c)
	checkSiteNames(c, &d.reporter)
	checkGatewayNames(c, &d.reporter)
	checkPublicKeys(c, &d.reporter)
	if len(d.errs) > 0 {
		return nil, d.errs.sorted()
	}
	return c, nil
}
