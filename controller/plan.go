package controller

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// plan is what one catalog publication carries, and what it leaves out.
type plan struct {
	sites  []config.Site
	relays map[string]*v1alpha1.RelaySpec
	// leftOut: Sites not published, with the problem (their Valid=False
	// message); nodeProblems: Nodes not published, with the problem.
	leftOut      map[string]string
	nodeProblems map[string]string
	// nodeNotes: Nodes published without a block of a family they have
	// no InternalIP of (no route could reach it).
	nodeNotes map[string]string
	// unregistered counts Gateways without a key, or without an
	// endpoint and not behind NAT, yet.
	unregistered int
	nodes        int
}

// buildPlan makes the catalog from the Sites, Gateways and Nodes of the
// caches. invalid lists Sites the site sync already found invalid (spec,
// overlaps, pool): they are left out. The rest go through the checks of
// `bridgehead check` (kube.CheckPlan) as one catalog; a Site or Gateway
// problem leaves its Site out, a Node problem the Node, and the check
// runs again on what is left, until it is clean. A problem that belongs
// to no Site fails the whole plan: nothing is published.
//
// A Gateway enters once it has a public key and an endpoint (in spec, or
// registered in status), or a public key and spec.behindNAT (a gateway
// behind NAT, published without an endpoint: its Site reaches the
// others directly or through its hubs, spec.via); a Node once it carries the site label and the
// pod-cidrs annotation, with its first InternalIP of each family.
func buildPlan(sites []*v1alpha1.Site, gws []*v1alpha1.Gateway, nodes []*corev1.Node, invalid map[string]string) (*plan, error) {
	p := &plan{leftOut: map[string]string{}, nodeProblems: map[string]string{}, nodeNotes: map[string]string{}, relays: map[string]*v1alpha1.RelaySpec{}}
	for name, msg := range invalid {
		p.leftOut[name] = msg
	}
	r := &kube.Resources{}
	keep := map[string]bool{}
	for _, s := range sites {
		if _, bad := p.leftOut[s.Name]; bad {
			continue
		}
		if err := catalog.CheckSiteName(s.Name); err != nil {
			p.leftOut[s.Name] = "metadata.name: " + err.Error()
			continue
		}
		keep[s.Name] = true
		r.Sites = append(r.Sites, *s)
	}
	slices.SortFunc(r.Sites, func(a, b v1alpha1.Site) int { return cmp.Compare(a.Name, b.Name) })
	for _, g := range gws {
		if !keep[g.Spec.Site] {
			continue
		}
		if cmp.Or(g.Spec.PublicKey, g.Status.PublicKey) == "" || (cmp.Or(g.Spec.Endpoint, g.Status.Endpoint) == "" && !g.Spec.BehindNAT) {
			p.unregistered++
			continue
		}
		r.Gateways = append(r.Gateways, *g)
	}
	slices.SortFunc(r.Gateways, func(a, b v1alpha1.Gateway) int { return cmp.Compare(a.Name, b.Name) })
	for _, n := range nodes {
		s := n.Labels[LabelSite]
		if !keep[s] || n.Annotations[AnnotationPodCIDRs] == "" {
			continue
		}
		cn, note, err := catalogNode(n)
		if err != nil {
			p.nodeProblems[n.Name] = err.Error()
			continue
		}
		if note != "" {
			p.nodeNotes[n.Name] = note
		}
		r.Nodes = append(r.Nodes, cn)
	}
	slices.SortFunc(r.Nodes, func(a, b corev1.Node) int { return cmp.Compare(a.Name, b.Name) })

	for len(r.Sites) > 0 {
		c, probs, _ := kube.CheckPlan(r)
		if len(probs) == 0 {
			p.sites = c.Sites
			break
		}
		dropSites, dropNodes := map[string]bool{}, map[string]bool{}
		for _, pr := range probs {
			switch {
			case pr.Kind == "Node":
			case pr.Site != "":
				dropSites[pr.Site] = true
				p.leftOut[pr.Site] = joinProblem(p.leftOut[pr.Site], pr.String())
			default:
				return nil, fmt.Errorf("catalog plan: %s", pr)
			}
		}
		// A Node problem counts when its Site stays (a Site's bad pod
		// CIDRs would otherwise also blame each of its nodes).
		for _, pr := range probs {
			if pr.Kind == "Node" && !dropSites[pr.Site] {
				dropNodes[pr.Name] = true
				p.nodeProblems[pr.Name] = joinProblem(p.nodeProblems[pr.Name], pr.String())
			}
		}
		r = filterResources(r, dropSites, dropNodes)
	}
	for _, s := range r.Sites {
		if s.Spec.Relay != nil {
			p.relays[s.Name] = s.Spec.Relay
		}
	}
	p.nodes = len(r.Nodes)
	return p, nil
}

// maxProblemLen bounds a Valid condition message built from problems.
const maxProblemLen = 2000

func joinProblem(have, add string) string {
	if have == "" {
		return add
	}
	if len(have) > maxProblemLen {
		return have
	}
	return have + "; " + add
}

// filterResources is r without the Sites (and their Gateways and Nodes)
// and Nodes named.
func filterResources(r *kube.Resources, sites, nodes map[string]bool) *kube.Resources {
	out := &kube.Resources{}
	for _, s := range r.Sites {
		if !sites[s.Name] {
			out.Sites = append(out.Sites, s)
		}
	}
	for _, g := range r.Gateways {
		if !sites[g.Spec.Site] {
			out.Gateways = append(out.Gateways, g)
		}
	}
	for _, n := range r.Nodes {
		if !sites[n.Labels[kube.SiteLabel]] && !nodes[n.Name] {
			out.Nodes = append(out.Nodes, n)
		}
	}
	return out
}

// catalogNode is the part of a Node the catalog carries: name, site
// label, its first InternalIP of each family, and its bridgehead blocks
// (the annotation, which the node side also reads) as spec.podCIDRs. A
// block of a family the node has no InternalIP of is left out, and note
// says so: the allocator gives a block of each family of a dual-stack
// Site, and a single-stack node cannot be routed its other one.
func catalogNode(n *corev1.Node) (out corev1.Node, note string, err error) {
	out = corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n.Name, Labels: map[string]string{kube.SiteLabel: n.Labels[LabelSite]}}}
	var have4, have6 bool
	for _, ip := range internalIPs(n) {
		if (ip.Is4() && have4) || (ip.Is6() && have6) {
			continue
		}
		have4, have6 = have4 || ip.Is4(), have6 || ip.Is6()
		out.Status.Addresses = append(out.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: ip.String()})
	}
	for _, s := range strings.Split(n.Annotations[AnnotationPodCIDRs], ",") {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			return out, "", fmt.Errorf("annotation %s: %q is not a CIDR", AnnotationPodCIDRs, s)
		}
		if (p.Addr().Is4() && !have4) || (p.Addr().Is6() && !have6) {
			note = fmt.Sprintf("pod block %s left out of the catalog: the node has no InternalIP of its family", p)
			continue
		}
		out.Spec.PodCIDRs = append(out.Spec.PodCIDRs, p.String())
	}
	return out, note, nil
}
