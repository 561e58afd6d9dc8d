package config

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"strings"

	"gopkg.in/yaml.v3"
)

const (
	kubeFieldKubeconfig  = "kubernetes.kubeconfig"
	kubeFieldInCluster   = "kubernetes.inCluster"
	kubeFieldFollow      = "kubernetes.follow"
	kubeFieldNamespace   = "kubernetes.namespace"
	kubeFieldCatalogFile = "kubernetes.catalogFile"
)

// Defaults of the kubernetes section.
const (
	// DefaultCatalogNamespace is where the controller publishes the
	// catalog's ConfigMaps (package kube/catalog).
	DefaultCatalogNamespace = "bridgehead-system"
	// DefaultCatalogFile is the followed catalog's file, beside the
	// config.
	DefaultCatalogFile = "catalog.yaml"
)

// Kubernetes connects the gateway to the cluster. It registers itself:
// it publishes its public key, endpoint and readiness into its Gateway
// object's status (package kube/register). With Follow it also takes its
// sites from the catalog the controller publishes (package kube/follow),
// through a file beside the config. Off when the section is absent
// (Config.Kubernetes nil). It is read at start: a reload that changes it
// is refused (a restart applies it).
type Kubernetes struct {
	// Kubeconfig is the gateway's own credential (it may write only its
	// Gateway's status, and read the catalog); a relative path is taken
	// relative to the config file.
	Kubeconfig string `yaml:"kubeconfig"`
	// InCluster uses the pod's own ServiceAccount token and the API
	// server the pod is given (KUBERNETES_SERVICE_HOST), for a gateway
	// running in the cluster (deploy/kubernetes/gateway); instead of
	// Kubeconfig.
	InCluster bool `yaml:"inCluster"`
	// Gateway is the Gateway object's name (default "<site>.<gateway>",
	// how `catalog to-resources` names it).
	Gateway string `yaml:"gateway"`
	// Follow takes the sites from the published catalog: the gateway
	// watches the catalog's ConfigMaps in Namespace and writes each
	// valid change to CatalogFile, which the config then reads its sites
	// from (and a config with inline sites is refused). The file is the
	// gateway's source of truth: it keeps forwarding on it, and starts
	// from it, while the API server is away.
	Follow bool `yaml:"follow"`
	// Namespace holds the catalog's ConfigMaps (default
	// DefaultCatalogNamespace); only with Follow.
	Namespace string `yaml:"namespace"`
	// CatalogFile is the followed catalog (default DefaultCatalogFile),
	// relative to the config file's directory unless absolute; only with
	// Follow. It holds one key, sites, in the config file's format.
	CatalogFile string `yaml:"catalogFile"`
}

// KubeconfigPath is Kubernetes.Kubeconfig resolved against the config
// file's directory; "" when the section is absent.
func (c *Config) KubeconfigPath() string {
	if c.Kubernetes == nil {
		return ""
	}
	return c.RelayPath(c.Kubernetes.Kubeconfig)
}

// Follows reports whether the sites come from a followed catalog file.
func (c *Config) Follows() bool {
	return c.Kubernetes != nil && c.Kubernetes.Follow
}

// CatalogPath is the followed catalog file resolved against the config
// file's directory; "" when the config does not follow a catalog.
func (c *Config) CatalogPath() string {
	if !c.Follows() {
		return ""
	}
	return c.RelayPath(c.Kubernetes.CatalogFile)
}

func (d *decoder) kubernetes(n *yaml.Node, path string, c *Config) {
	k := &Kubernetes{}
	c.Kubernetes = k
	var follow *bool
	d.mapping(n, path, []field{
		{"kubeconfig", d.str(&k.Kubeconfig)},
		{"inCluster", func(n *yaml.Node, path string) {
			var b *bool
			d.boolPtr(&b)(n, path)
			k.InCluster = b != nil && *b
		}},
		{"gateway", d.str(&k.Gateway)},
		{"follow", d.boolPtr(&follow)},
		{"namespace", d.str(&k.Namespace)},
		{"catalogFile", d.str(&k.CatalogFile)},
	})
	k.Follow = follow != nil && *follow
}

// kubernetesDefaults names the Gateway object after the site and gateway
// (kube.GatewayName; config cannot import kube), and places a followed
// catalog.
func kubernetesDefaults(c *Config) {
	k := c.Kubernetes
	if k == nil {
		return
	}
	if k.Gateway == "" && c.Site != "" && c.Gateway != "" {
		k.Gateway = c.Site + "." + c.Gateway
	}
	if k.Follow {
		if k.Namespace == "" {
			k.Namespace = DefaultCatalogNamespace
		}
		if k.CatalogFile == "" {
			k.CatalogFile = DefaultCatalogFile
		}
	}
}

// checkKubernetes (Parse): the section names a kubeconfig; namespace and
// catalogFile only mean something with follow.
func checkKubernetes(c *Config, r *reporter) {
	k := c.Kubernetes
	if k == nil {
		return
	}
	switch {
	case k.Kubeconfig == "" && !k.InCluster:
		r.errorf(kubeFieldKubeconfig, "is required when kubernetes is set: the gateway's own kubeconfig file (or inCluster: true in a pod)")
	case k.Kubeconfig != "" && k.InCluster:
		r.errorf(kubeFieldInCluster, "is set with kubernetes.kubeconfig: use one credential, the kubeconfig or the pod's")
	}
	if !k.Follow {
		if k.Namespace != "" {
			r.errorf(kubeFieldNamespace, "is only used with kubernetes.follow: true")
		}
		if k.CatalogFile != "" {
			r.errorf(kubeFieldCatalogFile, "is only used with kubernetes.follow: true")
		}
	}
}

// checkKubernetesFiles (Check, on the gateway): the kubeconfig file is
// there to read.
func checkKubernetesFiles(c *Config, r *reporter, opts CheckOptions) {
	if c.Kubernetes == nil || c.Kubernetes.Kubeconfig == "" || opts.SkipPrivateKey {
		return
	}
	if _, err := os.ReadFile(c.KubeconfigPath()); err != nil {
		r.errorf(kubeFieldKubeconfig, "cannot read the kubeconfig: %v", err)
	}
}

// readCatalog (Parse) takes the sites of a config that follows a catalog
// from its catalog file: the bytes l.catalog holds when set (the
// follower checks a candidate before writing it), else the file. Its
// problems name the catalog file and its lines; a config that also lists
// sites itself is refused, naming the field. The catalog may also hold
// the gateway's relay section (the follower writes it from its Site's
// published relay); a config that sets its own relay as well is refused,
// naming both. It returns the catalog's bytes (nil when it could not be
// read).
func (l loader) readCatalog(c *Config, d *decoder) []byte {
	if !c.Follows() {
		return nil
	}
	path := c.CatalogPath()
	if c.Sites != nil || d.lines["sites"] != 0 {
		d.errorf("sites", "must not be set with kubernetes.follow: true; the sites come from the followed catalog %s", path)
		c.Sites = nil
	}
	data := l.catalog
	if data == nil {
		var err error
		data, err = os.ReadFile(path)
		if err != nil {
			if os.IsNotExist(err) {
				d.errorf(kubeFieldCatalogFile, "catalog file %s does not exist: the gateway writes it once it has read the catalog from the API server (kubernetes.follow)", path)
			} else {
				d.errorf(kubeFieldCatalogFile, "cannot read catalog file %s: %v", path, err)
			}
			return nil
		}
	}
	d.catalog = path
	own, ownLine := c.Relay, d.lines["relay"]
	cd := &decoder{reporter{file: path, lines: d.lines}}
	root, ok := cd.document(data)
	if ok {
		var published *Relay
		cd.mapping(root, "", []field{
			{"sites", func(n *yaml.Node, path string) { cd.sites(n, path, c) }},
			{"relay", func(n *yaml.Node, path string) {
				cd.relay(n, path, c)
				published = c.Relay
			}},
		})
		if c.Sites == nil {
			cd.errorAt(root.Line, "sites", "the catalog lists no sites")
		}
		switch {
		case published != nil && own != nil:
			// The Site's relay is published: one of the two must go,
			// and the operator says which (a reload must not silently
			// replace a relay someone wrote by hand).
			catLine := d.lines["relay"] // the maps are shared
			c.Relay = own
			d.lines["relay"] = ownLine
			d.errorAt(ownLine, "relay", "must not be set here: the followed catalog %s sets this site's relay (line %d, from the Site's spec.relay); remove one of the two",
				path, catLine)
		case published != nil:
			relayDefaults(published)
			c.relayFromCatalog = true
			d.catalogRelay = true
		}
	}
	d.errs = append(d.errs, cd.errs...)
	return data
}

// catalogField reports whether a field path is a followed catalog's:
// its sites, and its relay when the relay came from it (relay).
func catalogField(field string, relay bool) bool {
	if relay && (field == "relay" || strings.HasPrefix(field, "relay.")) {
		return true
	}
	return field == "sites" || strings.HasPrefix(field, "sites[") || strings.HasPrefix(field, "sites.")
}

// hashSources is Hash of a config file and its followed catalog.
func hashSources(config, catalog []byte) string {
	h := sha256.New()
	h.Write(config)
	h.Write([]byte("\x00catalog\x00"))
	h.Write(catalog)
	return hex.EncodeToString(h.Sum(nil))[:12]
}

// HashWith is what Hash would be for a Config parsed now from data, the
// new contents of c's file: with a followed catalog, the catalog file is
// read and hashed too ("" when it cannot be read). A reload compares it
// with the running config's Hash to skip an unchanged pair of files.
func (c *Config) HashWith(data []byte) string {
	if !c.Follows() {
		return HashData(data)
	}
	cat, err := os.ReadFile(c.CatalogPath())
	if err != nil {
		return ""
	}
	return hashSources(data, cat)
}

// checkFollowedSelf (Check, warning): a followed catalog that does not
// list this gateway yet. The controller lists a Gateway once it has a
// public key and an endpoint, which the gateway registers itself: it
// runs meanwhile (routing to the sites it knows), and peers talk to it
// once the catalog lists it.
func checkFollowedSelf(c *Config, r *reporter) {
	if c.Follows() && c.LocalSite() != nil && c.LocalGateway() == nil {
		r.warnf("gateway", "%q is not in the followed catalog's site %q yet: peers reach it once it has registered its key and endpoint and the controller lists it", c.Gateway, c.Site)
	}
}
