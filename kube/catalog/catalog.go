package catalog

import (
	"errors"
	"strconv"

	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// Names, labels and data keys of the catalog's ConfigMaps. They are the
// interface between the controller (the writer) and the gateways (the
// readers) and must not change.
const (
	// BaseName is the base ConfigMap, the commit point of the sites
	// (every site's entry, without nodes).
	BaseName = "bridgehead-catalog"
	// CatalogLabel marks every catalog ConfigMap: KindSites on the base,
	// KindIndex on a site's index, KindNodes on node slices.
	CatalogLabel = v1.GroupName + "/catalog"
	KindSites    = "sites"
	KindIndex    = "index"
	KindNodes    = "nodes"
	// SiteLabel on a site's index and node slices names its site (the
	// label the controller also puts on Nodes).
	SiteLabel = v1.GroupName + "/site"

	// SitesKey (base) holds the sites in the config file's `sites:` YAML,
	// without nodes; SiteHashesKey (base) the hash of each site's entry
	// (siteHash); RelaysKey (base, only when a site has a relay) each
	// site's relay spec; IndexKey (index) the hash of its site's entry
	// and the site's node slices, in order, with the hash of each;
	// NodesKey (slice) the nodes.
	SitesKey      = "sites.yaml"
	SiteHashesKey = "sitehashes.yaml"
	RelaysKey     = "relays.yaml"
	IndexKey      = "index.yaml"
	NodesKey      = "nodes.yaml"
	// SlicesKey (base) is the slice lists of the format before per-site
	// indexes, when the base was the one commit point and every join
	// rewrote it. Assemble still reads it, so readers can be upgraded
	// before the controller; Render no longer writes it.
	SlicesKey = "slices.yaml"

	// MaxNodesPerSlice bounds the nodes of one slice (Unbounded-Net's
	// node slices hold 500 too): at ~110 bytes a dual-stack node, a
	// slice stays near 55 KiB.
	MaxNodesPerSlice = 500
	// MaxObjectBytes bounds the data of any one ConfigMap Render
	// produces, well under etcd's 1.5 MiB request limit (the object's
	// metadata and the API server's encoding add to it).
	MaxObjectBytes = 1 << 20
)

// ErrIncomplete is wrapped by Assemble's error when a slice the base
// lists is missing or does not hash to the listed value: a publication is
// in progress (or a slice was lost). The reader keeps its last good
// catalog and tries again on the next change.
var ErrIncomplete = errors.New("catalog publication incomplete")

// ErrUnknownSite is wrapped by Assemble's error when the base does not
// list the site asked for (it is not a Site, or it is invalid and left
// out of the catalog).
var ErrUnknownSite = errors.New("site not in the catalog")

// SliceName is the name of node slice k of site.
func SliceName(site string, k int) string {
	return BaseName + "-" + site + "-" + strconv.Itoa(k)
}

// IndexName is the name of site's index, the commit point of its node
// slices. A slice's name ends in digits, an index's in "-index", so no
// site's index is another site's slice.
func IndexName(site string) string {
	return BaseName + "-" + site + "-index"
}

// Index is the content of a site's index (IndexKey).
type Index struct {
	// Site is the hash of the site's entry in the base this index was
	// written with (the base's SiteHashesKey lists the same value while
	// that entry is in force).
	Site string `yaml:"site" json:"site"`
	// Slices are the site's node slices, in order.
	Slices []SliceRef `yaml:"slices" json:"slices"`
}

// SliceRef is one entry of the base's slice list.
type SliceRef struct {
	Name string `yaml:"name" json:"name"`
	// Hash is the hex SHA-256 of the slice's NodesKey data.
	Hash string `yaml:"hash" json:"hash"`
}
