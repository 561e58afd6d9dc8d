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
// site from its index and slices (objs holds them by ConfigMap name; other
// sites' objects and stale slices are ignored). The index must have been
// written for the site's entry the base holds (the hashes match), and
// every slice it lists must be there and hash to the listed value; else
// the error wraps ErrIncomplete: a publication is in progress (a writer
// writes slices, then indexes, then the base), and the reader must keep
// what it has. A site the base does not list is an error wrapping
// ErrUnknownSite. Malformed data is an error naming the ConfigMap and key.
//
// A base of the format before indexes (SlicesKey, the slice lists in the
// base) is read as it was: its slice lists are the commit point.
//
// The result is not validated beyond decoding: the reader runs it through
// the same checks as any catalog (config.Check) before using it.
func Assemble(base *corev1.ConfigMap, objs map[string]*corev1.ConfigMap, site string) ([]config.Site, error) {
	b, err := decodeBase(base)
	if err != nil {
		return nil, err
	}
	idx := -1
	for i := range b.sites {
		if b.sites[i].Name == site {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("catalog: %w: %q", ErrUnknownSite, site)
	}
	refs, err := b.siteRefs(site, func(name string) *corev1.ConfigMap { return objs[name] }, true)
	if err != nil {
		return nil, err
	}
	sites := b.sites
	for _, ref := range refs {
		cm := objs[ref.Name]
		if cm == nil {
			return nil, fmt.Errorf("catalog: site %q: %w: slice %s is missing", site, ErrIncomplete, ref.Name)
		}
		data := cm.Data[NodesKey]
		if h := Hash([]byte(data)); h != ref.Hash {
			return nil, fmt.Errorf("catalog: site %q: %w: slice %s has hash %.12s, the index lists %.12s", site, ErrIncomplete, ref.Name, h, ref.Hash)
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

// Refs is each site's slice list as its index has it (or, in the format
// before indexes, the base), for a writer that keeps its buckets and for
// a reader of every site's nodes. A site without a readable index is left
// out; the site hashes are not compared (Assemble does that). Only an
// unreadable base is an error.
func Refs(base *corev1.ConfigMap, get func(name string) *corev1.ConfigMap) (map[string][]SliceRef, error) {
	b, err := decodeBase(base)
	if err != nil {
		return nil, err
	}
	out := make(map[string][]SliceRef, len(b.sites))
	for _, s := range b.sites {
		if refs, err := b.siteRefs(s.Name, get, false); err == nil {
			out[s.Name] = refs
		}
	}
	return out, nil
}

// DecodeBase reads the sites (without nodes) of a base ConfigMap, and in
// the format before indexes its slice lists (nil otherwise). Nodes in the
// sites data, a site without a hash (or, before indexes, a slice list), or
// a hash or list of a site that is not listed are errors.
func DecodeBase(base *corev1.ConfigMap) ([]config.Site, map[string][]SliceRef, error) {
	b, err := decodeBase(base)
	if err != nil {
		return nil, nil, err
	}
	return b.sites, b.legacy, nil
}

// DecodeIndex reads a site index's IndexKey data.
func DecodeIndex(cm *corev1.ConfigMap) (Index, error) {
	var idx Index
	data, ok := cm.Data[IndexKey]
	if !ok {
		return idx, fmt.Errorf("catalog: ConfigMap %s %s: missing", cm.Name, IndexKey)
	}
	if err := decodeStrict([]byte(data), &idx); err != nil {
		return idx, fmt.Errorf("catalog: ConfigMap %s %s: %w", cm.Name, IndexKey, err)
	}
	if len(idx.Site) != 64 {
		return idx, fmt.Errorf("catalog: ConfigMap %s %s: site: needs a 64-digit hash", cm.Name, IndexKey)
	}
	if err := checkRefs(idx.Slices); err != nil {
		return idx, fmt.Errorf("catalog: ConfigMap %s %s: slices%w", cm.Name, IndexKey, err)
	}
	return idx, nil
}

// decodedBase is a base ConfigMap read: its sites, and either each
// site's entry hash (hashes) or, before indexes, its slice lists (legacy).
type decodedBase struct {
	name   string
	sites  []config.Site
	hashes map[string]string
	legacy map[string][]SliceRef
}

func decodeBase(base *corev1.ConfigMap) (*decodedBase, error) {
	if base == nil {
		return nil, fmt.Errorf("catalog: %w: no ConfigMap %s", ErrIncomplete, BaseName)
	}
	where := func(key string) string { return "catalog: ConfigMap " + base.Name + " " + key }
	listKey := SiteHashesKey
	if _, ok := base.Data[SiteHashesKey]; !ok {
		if _, old := base.Data[SlicesKey]; old {
			listKey = SlicesKey
		}
	}
	for _, key := range []string{SitesKey, listKey} {
		if _, ok := base.Data[key]; !ok {
			return nil, fmt.Errorf("%s: missing", where(key))
		}
	}
	var doc struct {
		Sites []config.Site `yaml:"sites"`
	}
	if err := decodeStrict([]byte(base.Data[SitesKey]), &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", where(SitesKey), err)
	}
	b := &decodedBase{name: base.Name, sites: doc.Sites}
	listed := map[string]bool{}
	if listKey == SlicesKey {
		b.legacy = map[string][]SliceRef{}
		if err := decodeStrict([]byte(base.Data[SlicesKey]), &b.legacy); err != nil {
			return nil, fmt.Errorf("%s: %w", where(SlicesKey), err)
		}
		for name, list := range b.legacy {
			listed[name] = true
			if err := checkRefs(list); err != nil {
				return nil, fmt.Errorf("%s: %s%w", where(SlicesKey), name, err)
			}
		}
	} else {
		b.hashes = map[string]string{}
		if err := decodeStrict([]byte(base.Data[SiteHashesKey]), &b.hashes); err != nil {
			return nil, fmt.Errorf("%s: %w", where(SiteHashesKey), err)
		}
		for name, h := range b.hashes {
			listed[name] = true
			if len(h) != 64 {
				return nil, fmt.Errorf("%s: %s: needs a 64-digit hash", where(SiteHashesKey), name)
			}
		}
	}
	seen := map[string]bool{}
	for i, s := range doc.Sites {
		if len(s.Nodes) > 0 {
			return nil, fmt.Errorf("%s: sites[%d] (%q) lists nodes; they belong in its slices", where(SitesKey), i, s.Name)
		}
		if seen[s.Name] {
			return nil, fmt.Errorf("%s: site %q listed twice", where(SitesKey), s.Name)
		}
		seen[s.Name] = true
		if !listed[s.Name] {
			return nil, fmt.Errorf("%s: no entry for site %q", where(listKey), s.Name)
		}
	}
	for name := range listed {
		if !seen[name] {
			return nil, fmt.Errorf("%s: an entry for site %q, which %s does not list", where(listKey), name, SitesKey)
		}
	}
	return b, nil
}

// siteRefs is site's slice list: the base's before indexes, else its
// index's, which (when pinned) must have been written for the site's
// entry in this base.
func (b *decodedBase) siteRefs(site string, get func(name string) *corev1.ConfigMap, pinned bool) ([]SliceRef, error) {
	if b.legacy != nil {
		return b.legacy[site], nil
	}
	name := IndexName(site)
	cm := get(name)
	if cm == nil {
		return nil, fmt.Errorf("catalog: site %q: %w: index %s is missing", site, ErrIncomplete, name)
	}
	idx, err := DecodeIndex(cm)
	if err != nil {
		return nil, err
	}
	if pinned && idx.Site != b.hashes[site] {
		return nil, fmt.Errorf("catalog: site %q: %w: index %s was written for the site's entry %.12s, the base holds %.12s", site, ErrIncomplete, name, idx.Site, b.hashes[site])
	}
	return idx.Slices, nil
}

// checkRefs refuses a slice list entry without a name or a full hash.
func checkRefs(list []SliceRef) error {
	for i, r := range list {
		if r.Name == "" || len(r.Hash) != 64 {
			return fmt.Errorf("[%d]: needs a name and a 64-digit hash", i)
		}
	}
	return nil
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
