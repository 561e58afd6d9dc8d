package catalog

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	sigyaml "sigs.k8s.io/yaml"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// Option adjusts Render.
type Option func(*options)

type options struct {
	namespace string
	relays    map[string]*v1.RelaySpec
	previous  map[string]int
}

// Namespace sets the namespace of the rendered objects.
func Namespace(ns string) Option { return func(o *options) { o.namespace = ns } }

// Relays adds the sites' relay specs (by site name) to the base; a relay
// of a site not rendered is left out.
func Relays(r map[string]*v1.RelaySpec) Option { return func(o *options) { o.relays = r } }

// PreviousBuckets gives each site's slice count in the publication in
// force (BucketCounts of the publication): a site keeps its count while its size
// stays within the band around it (see bucketCount), so its slices stay
// where they are.
func PreviousBuckets(counts map[string]int) Option {
	return func(o *options) { o.previous = counts }
}

// BucketCounts is the slice count of each site a publication lists
// (see Refs; nil for a nil or unreadable base), for PreviousBuckets.
func BucketCounts(base *corev1.ConfigMap, get func(name string) *corev1.ConfigMap) map[string]int {
	refs, err := Refs(base, get)
	if err != nil {
		return nil
	}
	out := make(map[string]int, len(refs))
	for site, list := range refs {
		out[site] = len(list)
	}
	return out
}

// Bucket bands (see bucketCount): a new count aims at bucketTarget nodes
// a slice on average; a count in force is kept while the average stays
// within [bucketShrink, bucketGrow] nodes.
const (
	bucketTarget = MaxNodesPerSlice / 2     // 250
	bucketGrow   = MaxNodesPerSlice * 4 / 5 // 400
	bucketShrink = MaxNodesPerSlice / 5     // 100
)

// bucketCount is the number of slices of a site of n nodes whose count in
// force is prev (0: none): prev while it is a power of two and the
// average stays within [bucketShrink, bucketGrow] (a site of one slice
// never shrinks), else the smallest power of two that brings the average
// to bucketTarget or under. Halving it merges slices k and k+count/2;
// doubling splits each in two.
func bucketCount(n, prev int) int {
	if n == 0 {
		return 0
	}
	if prev > 0 && prev&(prev-1) == 0 && n <= prev*bucketGrow && (prev == 1 || n >= prev*bucketShrink) {
		return prev
	}
	b := 1
	for b*bucketTarget < n {
		b *= 2
	}
	return b
}

// bucketOf is the slice of a node in a site of count slices (a power of
// two): the low bits of the FNV-1a hash of its name. The hash must never
// change: a different one would move every node once.
func bucketOf(name string, count int) int {
	h := fnv.New32a()
	h.Write([]byte(name))
	return int(h.Sum32() & uint32(count-1))
}

// buckets splits a site's nodes (sorted by name) into count slices by
// bucketOf, doubling count while a slice would hold more than
// MaxNodesPerSlice (names that hash unevenly). Each slice keeps the
// name order.
func buckets(nodes []config.Node, count int) [][]config.Node {
	for {
		out := make([][]config.Node, count)
		full := false
		for _, n := range nodes {
			k := bucketOf(n.Name, count)
			out[k] = append(out[k], n)
			full = full || len(out[k]) > MaxNodesPerSlice
		}
		if !full {
			return out
		}
		count *= 2
	}
}

// Render renders sites into the base ConfigMap (first), then each
// site's node slices followed by its index, in site order then slice
// order: the order a writer may write them in one at a time (see
// WriteOrder for parallel writers). The sites go into the base in the
// order given, each site's nodes into its slices sorted by name: the same
// sites give byte-identical objects. An invalid object name or label, a
// site listed twice or an object whose data exceeds MaxObjectBytes is an
// error naming the site.
func Render(sites []config.Site, opts ...Option) ([]*corev1.ConfigMap, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bare := make([]config.Site, len(sites))
	hashes := map[string]string{}
	var out []*corev1.ConfigMap
	for i, s := range sites {
		if err := CheckSiteName(s.Name); err != nil {
			return nil, fmt.Errorf("catalog: sites[%d]: %w", i, err)
		}
		if _, dup := hashes[s.Name]; dup {
			return nil, fmt.Errorf("catalog: sites[%d]: site %q listed twice", i, s.Name)
		}
		bare[i] = s
		bare[i].Nodes = nil
		h, err := siteHash(bare[i])
		if err != nil {
			return nil, fmt.Errorf("catalog: site %q: %w", s.Name, err)
		}
		hashes[s.Name] = h
		nodes := slices.Clone(s.Nodes)
		slices.SortStableFunc(nodes, func(a, b config.Node) int { return cmp.Compare(a.Name, b.Name) })
		idx := Index{Site: h, Slices: []SliceRef{}}
		// Stable buckets: a node's slice depends on its name and the
		// site's slice count only, so a join or a leave rewrites one
		// slice (cutting by position in name order rewrote every slice
		// after it). Every slice of the count is written, empty or not,
		// so the index's list says the count.
		for k, part := range buckets(nodes, bucketCount(len(nodes), o.previous[s.Name])) {
			data := encodeNodes(part)
			name := SliceName(s.Name, k)
			cm := configMap(o.namespace, name, map[string]string{CatalogLabel: KindNodes, SiteLabel: s.Name},
				map[string]string{NodesKey: string(data)})
			if err := checkSize(cm); err != nil {
				return nil, fmt.Errorf("catalog: site %q: %w", s.Name, err)
			}
			idx.Slices = append(idx.Slices, SliceRef{Name: name, Hash: Hash(data)})
			out = append(out, cm)
		}
		// The site's commit point: its entry's hash and its slices'. A
		// join rewrites a slice and this, never the base.
		data, err := yaml.Marshal(idx)
		if err != nil {
			return nil, fmt.Errorf("catalog: site %q: %w", s.Name, err)
		}
		cm := configMap(o.namespace, IndexName(s.Name), map[string]string{CatalogLabel: KindIndex, SiteLabel: s.Name},
			map[string]string{IndexKey: string(data)})
		if err := checkSize(cm); err != nil {
			return nil, fmt.Errorf("catalog: site %q: %w", s.Name, err)
		}
		out = append(out, cm)
	}
	var sitesData bytes.Buffer
	if err := kube.WriteCatalog(&sitesData, &config.Config{Sites: bare}); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	hashData, err := yaml.Marshal(hashes) // map keys sorted
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	data := map[string]string{SitesKey: sitesData.String(), SiteHashesKey: string(hashData)}
	relays := map[string]*v1.RelaySpec{}
	for name, r := range o.relays {
		if _, ok := hashes[name]; ok && r != nil {
			relays[name] = r
		}
	}
	if len(relays) > 0 {
		b, err := sigyaml.Marshal(relays) // map keys sorted
		if err != nil {
			return nil, fmt.Errorf("catalog: relays: %w", err)
		}
		data[RelaysKey] = string(b)
	}
	base := configMap(o.namespace, BaseName, map[string]string{CatalogLabel: KindSites}, data)
	if err := checkSize(base); err != nil {
		return nil, fmt.Errorf("catalog: %w (%d sites)", err, len(sites))
	}
	return append([]*corev1.ConfigMap{base}, out...), nil
}

// siteHash is the hex SHA-256 of one site's entry (without nodes) as
// the base's SitesKey would hold it alone: what a site's index and the
// base's SiteHashesKey pin.
func siteHash(bare config.Site) (string, error) {
	var b bytes.Buffer
	if err := kube.WriteCatalog(&b, &config.Config{Sites: []config.Site{bare}}); err != nil {
		return "", err
	}
	return Hash(b.Bytes()), nil
}

// WriteOrder groups a Render's objects for a writer: node slices, then
// indexes, then the base. Every object is written only once every object
// it lists is (an index lists slices, the base pins the indexes' site
// hashes), so a writer may write each group's objects in parallel and
// must finish a group before it starts the next.
func WriteOrder(objs []*corev1.ConfigMap) (slices, indexes, base []*corev1.ConfigMap) {
	for _, o := range objs {
		switch o.Labels[CatalogLabel] {
		case KindNodes:
			slices = append(slices, o)
		case KindIndex:
			indexes = append(indexes, o)
		default:
			base = append(base, o)
		}
	}
	return slices, indexes, base
}

// Hash is the hex SHA-256 of a slice's NodesKey data, as the base lists it.
func Hash(data []byte) string {
	h := sha256.Sum256(data)
	return hex.EncodeToString(h[:])
}

// Size is the bytes of a ConfigMap's data (keys and values), the part of
// the object that grows with the catalog.
func Size(cm *corev1.ConfigMap) int {
	n := 0
	for k, v := range cm.Data {
		n += len(k) + len(v)
	}
	return n
}

func checkSize(cm *corev1.ConfigMap) error {
	if n := Size(cm); n > MaxObjectBytes {
		return fmt.Errorf("ConfigMap %s would hold %d bytes, over the %d-byte bound (etcd refuses objects over 1.5 MiB)", cm.Name, n, MaxObjectBytes)
	}
	return nil
}

// CheckSiteName refuses a site name that cannot name a slice or label it.
func CheckSiteName(name string) error {
	if errs := validation.IsValidLabelValue(name); name == "" || len(errs) > 0 {
		return fmt.Errorf("site name %q is not a valid label value: %s", name, strings.Join(errs, "; "))
	}
	if errs := validation.IsDNS1123Subdomain(IndexName(name)); len(errs) > 0 {
		return fmt.Errorf("site name %q makes an invalid ConfigMap name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

func configMap(ns, name string, labels, data map[string]string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data:       data,
	}
}

// encodeNodes writes nodes as `nodes:` followed by one flow mapping per
// node, every value double-quoted (a name such as "true" or "null" stays
// a string). It is written by hand: yaml.v3's encoder allocated 160 MB
// to write 10,000 nodes (BenchmarkRender).
func encodeNodes(nodes []config.Node) []byte {
	b := make([]byte, 0, 16+len(nodes)*128)
	b = append(b, "nodes:\n"...)
	for _, n := range nodes {
		b = append(b, "- {name: "...)
		b = strconv.AppendQuote(b, n.Name)
		b = appendValue(b, "address", n.Address.IsValid(), n.Address.String)
		b = appendValue(b, "podCIDR", n.PodCIDR.IsValid(), n.PodCIDR.String)
		b = appendValue(b, "address6", n.Address6.IsValid(), n.Address6.String)
		b = appendValue(b, "podCIDR6", n.PodCIDR6.IsValid(), n.PodCIDR6.String)
		b = append(b, "}\n"...)
	}
	return b
}

func appendValue(b []byte, key string, ok bool, value func() string) []byte {
	if !ok {
		return b
	}
	b = append(b, ", "...)
	b = append(b, key...)
	b = append(b, ": "...)
	return strconv.AppendQuote(b, value())
}
