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
// force (BucketCounts of its base): a site keeps its count while its size
// stays within the band around it (see bucketCount), so its slices stay
// where they are.
func PreviousBuckets(counts map[string]int) Option {
	return func(o *options) { o.previous = counts }
}

// BucketCounts is the slice count of each site a base lists (nil for a
// nil or unreadable base), for PreviousBuckets.
func BucketCounts(base *corev1.ConfigMap) map[string]int {
	if base == nil {
		return nil
	}
	refs := map[string][]SliceRef{}
	if err := decodeStrict([]byte(base.Data[SlicesKey]), &refs); err != nil {
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

// Render renders sites into the base ConfigMap (first) and the node
// slices of each site, in site order then slice order. The sites go into
// the base in the order given, each site's nodes into its slices sorted
// by name: the same sites give byte-identical objects. An invalid object
// name or label, a site listed twice or an object whose data exceeds
// MaxObjectBytes is an error naming the site.
func Render(sites []config.Site, opts ...Option) ([]*corev1.ConfigMap, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	bare := make([]config.Site, len(sites))
	refs := map[string][]SliceRef{}
	var out []*corev1.ConfigMap
	for i, s := range sites {
		if err := CheckSiteName(s.Name); err != nil {
			return nil, fmt.Errorf("catalog: sites[%d]: %w", i, err)
		}
		if _, dup := refs[s.Name]; dup {
			return nil, fmt.Errorf("catalog: sites[%d]: site %q listed twice", i, s.Name)
		}
		bare[i] = s
		bare[i].Nodes = nil
		nodes := slices.Clone(s.Nodes)
		slices.SortStableFunc(nodes, func(a, b config.Node) int { return cmp.Compare(a.Name, b.Name) })
		refs[s.Name] = []SliceRef{}
		// Stable buckets: a node's slice depends on its name and the
		// site's slice count only, so a join or a leave rewrites one
		// slice (cutting by position in name order rewrote every slice
		// after it). Every slice of the count is written, empty or not,
		// so the base's list says the count.
		for k, part := range buckets(nodes, bucketCount(len(nodes), o.previous[s.Name])) {
			data := encodeNodes(part)
			name := SliceName(s.Name, k)
			cm := configMap(o.namespace, name, map[string]string{CatalogLabel: KindNodes, SiteLabel: s.Name},
				map[string]string{NodesKey: string(data)})
			if err := checkSize(cm); err != nil {
				return nil, fmt.Errorf("catalog: site %q: %w", s.Name, err)
			}
			refs[s.Name] = append(refs[s.Name], SliceRef{Name: name, Hash: Hash(data)})
			out = append(out, cm)
		}
	}
	var sitesData bytes.Buffer
	if err := kube.WriteCatalog(&sitesData, &config.Config{Sites: bare}); err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	slicesData, err := yaml.Marshal(refs) // map keys sorted
	if err != nil {
		return nil, fmt.Errorf("catalog: %w", err)
	}
	data := map[string]string{SitesKey: sitesData.String(), SlicesKey: string(slicesData)}
	relays := map[string]*v1.RelaySpec{}
	for name, r := range o.relays {
		if _, ok := refs[name]; ok && r != nil {
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
	if errs := validation.IsDNS1123Subdomain(SliceName(name, 0)); len(errs) > 0 {
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
