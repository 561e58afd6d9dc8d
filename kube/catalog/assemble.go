package catalog

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/bridgehead/bridgehead/config"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// Assemble reads a publication back: every site of base, and the nodes of
// site from its slices (keyed by ConfigMap name; slices of other sites
// and stale slices are ignored). A slice the base lists that is missing
// or whose data does not hash to the listed value makes an error wrapping
// ErrIncomplete: the writer has not finished (it writes slices first and
// the base last), and the reader must keep what it has. A site the base
// does not list is an error wrapping ErrUnknownSite. Malformed data is an
// error naming the ConfigMap and key.
//
// The result is not validated beyond decoding: the reader runs it through
// the same checks as any catalog (config.Check) before using it.
func Assemble(base *corev1.ConfigMap, slices map[string]*corev1.ConfigMap, site string) ([]config.Site, error) {
	sites, refs, err := DecodeBase(base)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i := range sites {
		if sites[i].Name == site {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("catalog: %w: %q", ErrUnknownSite, site)
	}
	for _, ref := range refs[site] {
		cm := slices[ref.Name]
		if cm == nil {
			return nil, fmt.Errorf("catalog: site %q: %w: slice %s is missing", site, ErrIncomplete, ref.Name)
		}
		data := cm.Data[NodesKey]
		if h := Hash([]byte(data)); h != ref.Hash {
			return nil, fmt.Errorf("catalog: site %q: %w: slice %s has hash %.12s, the base lists %.12s", site, ErrIncomplete, ref.Name, h, ref.Hash)
		}
		nodes, err := DecodeNodes([]byte(data))
		if err != nil {
			return nil, fmt.Errorf("catalog: ConfigMap %s %s: %w", ref.Name, NodesKey, err)
		}
		sites[idx].Nodes = append(sites[idx].Nodes, nodes...)
	}
	// Slices are buckets of a hash, each in name order: the site's
	// nodes in name order, whatever the bucket count.
	ns := sites[idx].Nodes
	sort.Slice(ns, func(i, j int) bool { return ns[i].Name < ns[j].Name })
	return sites, nil
}

// DecodeBase reads the sites (without nodes) and the slice lists of a
// base ConfigMap. A slice list for a site that is not listed, a site
// without a slice list, or nodes in the sites data are errors.
func DecodeBase(base *corev1.ConfigMap) ([]config.Site, map[string][]SliceRef, error) {
	if base == nil {
		return nil, nil, fmt.Errorf("catalog: %w: no ConfigMap %s", ErrIncomplete, BaseName)
	}
	where := func(key string) string { return "catalog: ConfigMap " + base.Name + " " + key }
	for _, key := range []string{SitesKey, SlicesKey} {
		if _, ok := base.Data[key]; !ok {
			return nil, nil, fmt.Errorf("%s: missing", where(key))
		}
	}
	var doc struct {
		Sites []config.Site `yaml:"sites"`
	}
	if err := decodeStrict([]byte(base.Data[SitesKey]), &doc); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where(SitesKey), err)
	}
	refs := map[string][]SliceRef{}
	if err := decodeStrict([]byte(base.Data[SlicesKey]), &refs); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", where(SlicesKey), err)
	}
	seen := map[string]bool{}
	for i, s := range doc.Sites {
		if len(s.Nodes) > 0 {
			return nil, nil, fmt.Errorf("%s: sites[%d] (%q) lists nodes; they belong in its slices", where(SitesKey), i, s.Name)
		}
		if seen[s.Name] {
			return nil, nil, fmt.Errorf("%s: site %q listed twice", where(SitesKey), s.Name)
		}
		seen[s.Name] = true
		if _, ok := refs[s.Name]; !ok {
			return nil, nil, fmt.Errorf("%s: no slice list for site %q", where(SlicesKey), s.Name)
		}
	}
	for name, list := range refs {
		if !seen[name] {
			return nil, nil, fmt.Errorf("%s: slices of site %q, which %s does not list", where(SlicesKey), name, SitesKey)
		}
		for i, r := range list {
			if r.Name == "" || len(r.Hash) != 64 {
				return nil, nil, fmt.Errorf("%s: %s[%d]: needs a name and a 64-digit hash", where(SlicesKey), name, i)
			}
		}
	}
	return doc.Sites, refs, nil
}

// DecodeNodes reads a slice's NodesKey data.
func DecodeNodes(data []byte) ([]config.Node, error) {
	var doc struct {
		Nodes []config.Node `yaml:"nodes"`
	}
	if err := decodeStrict(data, &doc); err != nil {
		return nil, err
	}
	if len(doc.Nodes) > MaxNodesPerSlice {
		return nil, fmt.Errorf("%d nodes, over %d", len(doc.Nodes), MaxNodesPerSlice)
	}
	return doc.Nodes, nil
}

// DecodeRelays reads the base's relay specs by site (none when the base
// has no RelaysKey). kube.RelayToConfig turns one into a gateway's relay
// section.
func DecodeRelays(base *corev1.ConfigMap) (map[string]*v1.RelaySpec, error) {
	data, ok := base.Data[RelaysKey]
	if !ok {
		return nil, nil
	}
	out := map[string]*v1.RelaySpec{}
	if err := sigyaml.UnmarshalStrict([]byte(data), &out); err != nil {
		return nil, fmt.Errorf("catalog: ConfigMap %s %s: %w", base.Name, RelaysKey, err)
	}
	return out, nil
}

// decodeStrict decodes one YAML document, refusing unknown fields and a
// second document. Empty data decodes to the zero value.
func decodeStrict(data []byte, out any) error {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(out); err != nil && !errors.Is(err, io.EOF) {
		return err
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return fmt.Errorf("more than one YAML document")
	}
	return nil
}
