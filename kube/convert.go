package kube

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/bridgehead/bridgehead/config"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// SiteLabel on a Node names the site it is assigned to.
const SiteLabel = v1.GroupName + "/site"

// Default per-node block sizes (the CRD's defaults).
const (
	DefaultPodBlockSize  = 24
	DefaultPodBlockSize6 = 80
)

// Resources is a catalog as Kubernetes objects, in catalog order.
type Resources struct {
	Sites    []v1.Site
	Gateways []v1.Gateway
	Nodes    []corev1.Node
}

// GatewayName is the Gateway object name of gateway gw of site.
func GatewayName(site, gw string) string { return site + "." + gw }

// gatewayConfigName is the catalog name of Gateway g: its object name
// without the "<site>." prefix.
func gatewayConfigName(g *v1.Gateway) string {
	return strings.TrimPrefix(g.Name, g.Spec.Site+".")
}

// ObjectError is a problem with one field of one object.
type ObjectError struct {
	Kind, Name, Field, Msg string
}

func (e *ObjectError) Error() string {
	s := e.Msg
	if e.Field != "" {
		s = e.Field + ": " + s
	}
	if e.Kind != "" {
		s = e.Kind + " " + e.Name + ": " + s
	}
	return s
}

func objectError(kind, name string, err error) error {
	if oe, ok := err.(*ObjectError); ok {
		out := *oe
		out.Kind, out.Name = kind, name
		return &out
	}
	return &ObjectError{Kind: kind, Name: name, Msg: err.Error()}
}

// Local names the gateway a config file is for.
type Local struct{ Site, Gateway string }

// FromConfig converts c's sites, gateways and nodes, and its relay (onto
// the local site), into resources. A name that is not a valid Kubernetes
// object name, or a relay not listening on the local gateway's address,
// is an error naming the field.
func FromConfig(c *config.Config) (*Resources, error) {
	r := &Resources{}
	for i, s := range c.Sites {
		path := fmt.Sprintf("sites[%d]", i)
		if errs := validation.IsDNS1123Subdomain(s.Name); len(errs) > 0 {
			return nil, fmt.Errorf("%s.name: %q is not a valid Kubernetes name: %s", path, s.Name, strings.Join(errs, "; "))
		}
		site := v1.Site{
			TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Site"},
			ObjectMeta: metav1.ObjectMeta{Name: s.Name},
			Spec: v1.SiteSpec{
				NodeCIDRs:      cidrs(s.NodeCIDRs),
				PodCIDRs:       cidrs(s.PodCIDRs),
				RouterAddress:  v1.IP(addrString(s.RouterAddress)),
				RouterAddress6: v1.IPv6(addrString(s.RouterAddress6)),
				Keepalive:      duration(s.Keepalive),
				ProbeInterval:  duration(s.ProbeInterval),
				Via:            slices.Clone(s.Via),
			},
		}
		site.Spec.PodBlockSize, site.Spec.PodBlockSize6 = blockSizes(s.Nodes)
		if s.AllowedSources != nil { // absent stays absent, [] stays [] (allowedSources)
			l := v1.SiteSources(slices.Clone(s.AllowedSources))
			site.Spec.AllowedSources = &l
		}
		for j, g := range s.Gateways {
			name := GatewayName(s.Name, g.Name)
			if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
				return nil, fmt.Errorf("%s.gateways[%d].name: %q is not a valid Kubernetes name: %s", path, j, name, strings.Join(errs, "; "))
			}
			r.Gateways = append(r.Gateways, v1.Gateway{
				TypeMeta:   metav1.TypeMeta{APIVersion: v1.SchemeGroupVersion.String(), Kind: "Gateway"},
				ObjectMeta: metav1.ObjectMeta{Name: name},
				Spec: v1.GatewaySpec{
					Site:      s.Name,
					Address:   v1.IP(addrString(g.Address)),
					Address6:  v1.IPv6(addrString(g.Address6)),
					Endpoint:  g.Endpoint,
					PublicKey: g.PublicKey,
					// In a catalog, no endpoint is behind NAT.
					BehindNAT: !g.HasEndpoint(),
				},
			})
		}
		for j, n := range s.Nodes {
			if errs := validation.IsDNS1123Subdomain(n.Name); len(errs) > 0 {
				return nil, fmt.Errorf("%s.nodes[%d].name: %q is not a valid Kubernetes name: %s", path, j, n.Name, strings.Join(errs, "; "))
			}
			r.Nodes = append(r.Nodes, node(s.Name, n))
		}
		if c.Relay != nil && s.Name == c.Site {
			relay, err := relayFromConfig(c, s)
			if err != nil {
				return nil, err
			}
			site.Spec.Relay = relay
		}
		r.Sites = append(r.Sites, site)
	}
	return r, nil
}

func relayFromConfig(c *config.Config, s config.Site) (*v1.RelaySpec, error) {
	rl := c.Relay
	ap, err := netip.ParseAddrPort(rl.Listen)
	if err != nil {
		return nil, fmt.Errorf("relay.listen: %q is not IP:port", rl.Listen)
	}
	var gw *config.Gateway
	for i := range s.Gateways {
		if s.Gateways[i].Name == c.Gateway {
			gw = &s.Gateways[i]
		}
	}
	if gw == nil || ap.Addr().Unmap() != relayAddr(*gw) {
		return nil, fmt.Errorf("relay.listen: %s is not the address of gateway %q of site %q; as a resource the relay listens on each gateway's own address", rl.Listen, c.Gateway, s.Name)
	}
	out := &v1.RelaySpec{
		Port:                         int32(ap.Port()),
		AllowPodCIDRs:                rl.AllowPodCIDRs,
		MaxConnections:               int32(rl.MaxConnections),
		MaxConnectionsPerDestination: int32(rl.MaxConnectionsPerDestination),
		IdleTimeout:                  duration(rl.IdleTimeout),
		HeaderTimeout:                duration(rl.HeaderTimeout),
	}
	for _, p := range rl.AllowedPorts {
		out.AllowedPorts = append(out.AllowedPorts, int32(p))
	}
	out.MaxPendingPerSource = int32(rl.MaxPendingPerSource)
	out.AllowedClients = cidrs(rl.AllowedClients)
	if rl.TLS != nil {
		out.TLS = &v1.RelayTLS{CertFile: rl.TLS.CertFile, KeyFile: rl.TLS.KeyFile, ClientCAFile: rl.TLS.ClientCAFile,
			ClientNames: slices.Clone(rl.TLS.ClientNames)}
	}
	return out, nil
}

// node is config node n of site as a Node object: the site label, the
// InternalIP of each family and the pod CIDRs.
func node(site string, n config.Node) corev1.Node {
	out := corev1.Node{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Node"},
		ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{SiteLabel: site}},
	}
	for _, a := range []netip.Addr{n.Address, n.Address6} {
		if a.IsValid() {
			out.Status.Addresses = append(out.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
		}
	}
	for _, p := range []netip.Prefix{n.PodCIDR, n.PodCIDR6} {
		if p.IsValid() {
			out.Spec.PodCIDRs = append(out.Spec.PodCIDRs, p.String())
		}
	}
	if len(out.Spec.PodCIDRs) > 0 {
		out.Spec.PodCIDR = out.Spec.PodCIDRs[0]
	}
	return out
}

// blockSizes are the nodes' pod block sizes of each family when they all
// agree, else the defaults.
func blockSizes(nodes []config.Node) (v4, v6 int32) {
	v4, v6 = -1, -1
	agree := func(cur *int32, p netip.Prefix) {
		switch {
		case !p.IsValid():
		case *cur == -1:
			*cur = int32(p.Bits())
		case *cur != int32(p.Bits()):
			*cur = 0
		}
	}
	for _, n := range nodes {
		agree(&v4, n.PodCIDR)
		agree(&v6, n.PodCIDR6)
	}
	if v4 <= 0 {
		v4 = DefaultPodBlockSize
	}
	if v6 <= 0 {
		v6 = DefaultPodBlockSize6
	}
	return v4, v6
}

// ToConfig converts resources back into a catalog: the sites in the order
// of r.Sites, each with its Gateways (in r.Gateways order) and its Nodes
// (those labeled with its name, in r.Nodes order), and the relay of
// local's gateway when its Site has one. Site and Gateway of the result
// are local's; the rest of a config file (identity, interface, cluster)
// is not part of the resources.
func ToConfig(r *Resources, local Local) (*config.Config, error) {
	c := &config.Config{Site: local.Site, Gateway: local.Gateway}
	index := map[string]int{}
	for i := range r.Sites {
		s, err := siteToConfig(&r.Sites[i])
		if err != nil {
			return nil, objectError("Site", r.Sites[i].Name, err)
		}
		if _, dup := index[s.Name]; dup {
			return nil, &ObjectError{Kind: "Site", Name: s.Name, Field: "metadata.name", Msg: "listed twice"}
		}
		index[s.Name] = len(c.Sites)
		c.Sites = append(c.Sites, s)
	}
	for i := range r.Gateways {
		g := &r.Gateways[i]
		si, ok := index[g.Spec.Site]
		if !ok {
			return nil, &ObjectError{Kind: "Gateway", Name: g.Name, Field: "spec.site", Msg: fmt.Sprintf("no Site %q", g.Spec.Site)}
		}
		cg, err := gatewayToConfig(g)
		if err != nil {
			return nil, objectError("Gateway", g.Name, err)
		}
		c.Sites[si].Gateways = append(c.Sites[si].Gateways, cg)
		if g.Spec.Site == local.Site && cg.Name == local.Gateway {
			if rl := r.Sites[si].Spec.Relay; rl != nil {
				c.Relay = RelayToConfig(rl, cg)
			}
		}
	}
	for i := range r.Nodes {
		n := &r.Nodes[i]
		si, ok := index[n.Labels[SiteLabel]]
		if !ok {
			continue // not assigned to a site (yet)
		}
		cn, err := NodeToConfig(n)
		if err != nil {
			return nil, objectError("Node", n.Name, err)
		}
		c.Sites[si].Nodes = append(c.Sites[si].Nodes, cn)
	}
	return c, nil
}

func siteToConfig(s *v1.Site) (config.Site, error) {
	out := config.Site{Name: s.Name}
	var err error
	if out.NodeCIDRs, err = prefixes("spec.nodeCIDRs", s.Spec.NodeCIDRs); err != nil {
		return out, err
	}
	if out.PodCIDRs, err = prefixes("spec.podCIDRs", s.Spec.PodCIDRs); err != nil {
		return out, err
	}
	if out.RouterAddress, err = parseAddr("spec.routerAddress", string(s.Spec.RouterAddress)); err != nil {
		return out, err
	}
	if out.RouterAddress6, err = parseAddr("spec.routerAddress6", string(s.Spec.RouterAddress6)); err != nil {
		return out, err
	}
	out.Keepalive = fromDuration(s.Spec.Keepalive)
	out.ProbeInterval = fromDuration(s.Spec.ProbeInterval)
	out.Via = slices.Clone(s.Spec.Via)
	if l := s.Spec.AllowedSources; l != nil { // absent stays absent, [] stays [] (allowedSources)
		out.AllowedSources = append(config.SiteSources{}, *l...)
	}
	return out, nil
}

func gatewayToConfig(g *v1.Gateway) (config.Gateway, error) {
	out := config.Gateway{Name: gatewayConfigName(g), Endpoint: g.Spec.Endpoint, PublicKey: g.Spec.PublicKey}
	// A gateway that registered itself publishes what spec leaves out;
	// one behind NAT has no endpoint, whatever its status says.
	if out.Endpoint == "" && !g.Spec.BehindNAT {
		out.Endpoint = g.Status.Endpoint
	}
	if out.PublicKey == "" {
		out.PublicKey = g.Status.PublicKey
	}
	gatewayKeys(&out, g) // a key rollover the previous key signed (keys.go)
	var err error
	if out.Address, err = parseAddr("spec.address", string(g.Spec.Address)); err != nil {
		return out, err
	}
	if out.Address6, err = parseAddr("spec.address6", string(g.Spec.Address6)); err != nil {
		return out, err
	}
	return out, nil
}

// NodeToConfig is a Node's catalog entry: its name, the first InternalIP
// of each family and its spec.podCIDRs by family.
func NodeToConfig(n *corev1.Node) (config.Node, error) {
	out := config.Node{Name: n.Name}
	for _, a := range n.Status.Addresses {
		if a.Type != corev1.NodeInternalIP {
			continue
		}
		ip, err := netip.ParseAddr(a.Address)
		if err != nil {
			return out, &ObjectError{Field: "status.addresses", Msg: fmt.Sprintf("%q is not an IP address", a.Address)}
		}
		ip = ip.Unmap()
		switch {
		case ip.Is4() && !out.Address.IsValid():
			out.Address = ip
		case ip.Is6() && !out.Address6.IsValid():
			out.Address6 = ip
		}
	}
	pods := n.Spec.PodCIDRs
	if len(pods) == 0 && n.Spec.PodCIDR != "" {
		pods = []string{n.Spec.PodCIDR}
	}
	for _, s := range pods {
		p, err := netip.ParsePrefix(s)
		if err != nil {
			return out, &ObjectError{Field: "spec.podCIDRs", Msg: fmt.Sprintf("%q is not a CIDR", s)}
		}
		switch {
		case p.Addr().Is4() && !out.PodCIDR.IsValid():
			out.PodCIDR = p
		case p.Addr().Is6() && !out.PodCIDR6.IsValid():
			out.PodCIDR6 = p
		}
	}
	return out, nil
}

// relayAddr is the address a gateway's relay listens on: its address,
// or its IPv6 address when it has no other.
func relayAddr(gw config.Gateway) netip.Addr {
	if gw.Address.IsValid() {
		return gw.Address
	}
	return gw.Address6
}

// RelayToConfig is a Site's relay spec as gateway gw's relay section: it
// listens on gw's address at the spec's port.
func RelayToConfig(rl *v1.RelaySpec, gw config.Gateway) *config.Relay {
	out := &config.Relay{
		Listen:                       netip.AddrPortFrom(relayAddr(gw), uint16(rl.Port)).String(),
		AllowPodCIDRs:                rl.AllowPodCIDRs,
		MaxConnections:               int(rl.MaxConnections),
		MaxConnectionsPerDestination: int(rl.MaxConnectionsPerDestination),
		IdleTimeout:                  fromDuration(rl.IdleTimeout),
		HeaderTimeout:                fromDuration(rl.HeaderTimeout),
	}
	for _, p := range rl.AllowedPorts {
		out.AllowedPorts = append(out.AllowedPorts, int(p))
	}
	out.MaxPendingPerSource = int(rl.MaxPendingPerSource)
	for _, c := range rl.AllowedClients {
		// The CRD admits CIDRs only; one that does not parse is left
		// out, which narrows the list, never widens it.
		if p, err := netip.ParsePrefix(string(c)); err == nil {
			out.AllowedClients = append(out.AllowedClients, p)
		}
	}
	if rl.TLS != nil {
		out.TLS = &config.RelayTLS{CertFile: rl.TLS.CertFile, KeyFile: rl.TLS.KeyFile, ClientCAFile: rl.TLS.ClientCAFile,
			ClientNames: slices.Clone(rl.TLS.ClientNames)}
	}
	return out
}

func cidrs(ps []netip.Prefix) []v1.CIDR {
	var out []v1.CIDR
	for _, p := range ps {
		out = append(out, v1.CIDR(p.String()))
	}
	return out
}

func prefixes(field string, cs []v1.CIDR) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for i, c := range cs {
		p, err := netip.ParsePrefix(string(c))
		if err != nil {
			return nil, &ObjectError{Field: fmt.Sprintf("%s[%d]", field, i), Msg: fmt.Sprintf("%q is not a CIDR", c)}
		}
		out = append(out, p)
	}
	return out, nil
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func parseAddr(field, s string) (netip.Addr, error) {
	if s == "" {
		return netip.Addr{}, nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return a, &ObjectError{Field: field, Msg: fmt.Sprintf("%q is not an IP address", s)}
	}
	return a, nil
}

func duration(d time.Duration) *metav1.Duration {
	if d == 0 {
		return nil
	}
	return &metav1.Duration{Duration: d}
}

func fromDuration(d *metav1.Duration) time.Duration {
	if d == nil {
		return 0
	}
	return d.Duration
}
