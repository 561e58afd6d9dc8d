package config

import (
	"gopkg.in/yaml.v3"
)

// SiteSources is a site's source allow-list (sites[].allowedSources): the
// remote sites whose pod CIDRs may reach it through the gateways at all.
//
//   - absent (nil, or `allowedSources: null`): every site, as before the
//     field existed;
//   - empty (`allowedSources: []`): no remote site;
//   - a list: only the sites named.
//
// Only pod CIDRs are restricted: node CIDRs always pass (kubelets, the API
// server and health probes cross sites on them), and a site's own pods
// never cross a gateway. The sending gateway drops refused packets before
// sealing them, the receiving one after opening them (router/sitepolicy.go).
// It filters by site, beneath NetworkPolicy, which filters by pod.
//
// The nil/empty difference survives every path: this decoder and the
// catalog's yaml.v3 decoding make `[]` a non-nil empty list, and IsZero
// makes the catalog writer leave out only an absent list.
type SiteSources []string

// IsZero reports an absent list (yaml.v3's omitempty asks it): an empty
// one is written as `[]`.
func (l SiteSources) IsZero() bool { return l == nil }

// Restricts reports whether the list restricts anything (it is present).
func (l SiteSources) Restricts() bool { return l != nil }

// siteSources decodes an allowedSources list; a present list, even
// empty, is non-nil.
func (d *decoder) siteSources(dst *SiteSources) func(*yaml.Node, string) {
	return func(n *yaml.Node, path string) {
		list := SiteSources{}
		d.sequence(n, path, func(n *yaml.Node, path string) {
			if s, ok := d.scalar(n, path); ok {
				list = append(list, s)
			}
		})
		*dst = list
	}
}

// checkSitePolicy: every allowedSources entry names a site, once; a site
// naming itself is a warning (its own pods never cross a gateway, so the
// entry does nothing).
func checkSitePolicy(c *Config, r *reporter) {
	names := make(map[string]bool, len(c.Sites))
	for _, s := range c.Sites {
		names[s.Name] = true
	}
	for i, s := range c.Sites {
		seen := make(map[string]bool, len(s.AllowedSources))
		for j, name := range s.AllowedSources {
			path := indexPath(joinPath(indexPath("sites", i), "allowedSources"), j)
			r.ops++
			switch {
			case !names[name]:
				r.errorf(path, "%q is not a site%s", name, suggestSite(name, c.Sites))
			case seen[name]:
				r.errorf(path, "%q is listed twice", name)
			case name == s.Name:
				r.warnf(path, "%q is this site itself: its own pods never cross a gateway, so the entry has no effect", name)
			}
			seen[name] = true
		}
	}
}
