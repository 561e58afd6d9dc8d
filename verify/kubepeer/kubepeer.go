// Package kubepeer finds, through the API server, what a verify pod of a
// cluster-wide run needs: the sites from the catalog the controller
// publishes, and the other pods of its run (one Job spread over the
// sites), so that one Job checks every site against every other with no
// address written by hand.
//
// Its credential needs get on the catalog's base ConfigMap (in the
// controller's namespace) and list on pods in the Job's namespace
// (deploy/kubernetes/verify-rbac.yaml).
package kubepeer

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// Sites reads the sites (without nodes) of the catalog published in
// namespace ns, as every gateway and node agent sees them.
func Sites(ctx context.Context, client kubernetes.Interface, ns string) ([]config.Site, error) {
	base, err := client.CoreV1().ConfigMaps(ns).Get(ctx, catalog.BaseName, metav1.GetOptions{})
	var status apierrors.APIStatus
	switch {
	case err != nil && !errors.As(err, &status):
		return nil, fmt.Errorf("cannot reach the API server to read the published catalog (ConfigMap %s/%s): %w: from a pod the way there is the kubernetes Service, from another site than the API server's through the gateways (bridgehead verify on a gateway of this site)",
			ns, catalog.BaseName, err)
	case err != nil:
		return nil, fmt.Errorf("the published catalog (ConfigMap %s/%s): %w", ns, catalog.BaseName, err)
	}
	sites, _, err := catalog.DecodeBase(base)
	if err != nil {
		return nil, err
	}
	if len(sites) == 0 {
		return nil, fmt.Errorf("the published catalog (ConfigMap %s/%s) lists no site: is a Site valid (kubectl get sites)?", ns, catalog.BaseName)
	}
	return sites, nil
}

// SiteOf is the site whose nodeCIDRs hold a node address, or "".
func SiteOf(sites []config.Site, node netip.Addr) string {
	for _, s := range sites {
		for _, p := range s.NodeCIDRs {
			if p.Contains(node) {
				return s.Name
			}
		}
	}
	return ""
}

// podSite is the site whose podCIDRs hold a pod address, or "".
func podSite(sites []config.Site, pod netip.Addr) string {
	for _, s := range sites {
		for _, p := range s.PodCIDRs {
			if p.Contains(pod) {
				return s.Name
			}
		}
	}
	return ""
}

// Peer is another pod of the run.
type Peer struct {
	Name, Node, Site string
	Addr             netip.Addr
}

// Found is what Peers saw when it stopped waiting.
type Found struct {
	Peers []Peer
	// Missing are the sites with no running pod of the run, this one's
	// own pod counted; Pending the run's pods not running yet.
	Missing, Pending []string
}

// Peers lists, every second until wait passes, the pods of namespace ns
// matching selector other than self, and returns once every site has a
// running pod of the run (self counted for its own site) and none of the
// run's pods is still pending: the whole Job is up. When wait passes
// first, it returns what runs, with the sites that have none.
func Peers(ctx context.Context, client kubernetes.Interface, ns, selector, self, selfSite string, sites []config.Site, wait time.Duration) (Found, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var f Found
	for {
		list, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
		switch {
		case err == nil:
			f = found(list.Items, self, selfSite, sites)
			if len(f.Missing) == 0 && len(f.Pending) == 0 {
				return f, nil
			}
		case ctx.Err() == nil:
			return Found{}, fmt.Errorf("pods of this run (namespace %s, %s): %w", ns, selector, err)
		}
		select {
		case <-tick.C:
		case <-ctx.Done():
			return f, nil
		}
	}
}

func found(pods []corev1.Pod, self, selfSite string, sites []config.Site) Found {
	var f Found
	has := map[string]bool{selfSite: selfSite != ""}
	for _, p := range pods {
		if p.Name == self || p.DeletionTimestamp != nil {
			continue
		}
		switch p.Status.Phase {
		case corev1.PodPending:
			f.Pending = append(f.Pending, p.Name)
			continue
		case corev1.PodRunning:
		default:
			continue // a finished pod of the run answers nothing
		}
		a, err := netip.ParseAddr(p.Status.PodIP)
		if err != nil || p.Spec.HostNetwork {
			continue
		}
		site := podSite(sites, a.Unmap())
		has[site] = true
		f.Peers = append(f.Peers, Peer{Name: p.Name, Node: p.Spec.NodeName, Site: site, Addr: a.Unmap()})
	}
	for _, s := range sites {
		if !has[s.Name] {
			f.Missing = append(f.Missing, s.Name)
		}
	}
	sort.Slice(f.Peers, func(i, j int) bool { return f.Peers[i].Name < f.Peers[j].Name })
	slices.Sort(f.Pending)
	return f
}

// String is a one-line summary for the log.
func (f Found) String() string {
	var parts []string
	for _, p := range f.Peers {
		parts = append(parts, fmt.Sprintf("%s (%s, %s, %s)", p.Name, p.Site, p.Node, p.Addr))
	}
	s := fmt.Sprintf("%d peers: %s", len(f.Peers), strings.Join(parts, ", "))
	if len(f.Missing) > 0 {
		s += "; no pod in " + strings.Join(f.Missing, ", ")
	}
	if len(f.Pending) > 0 {
		s += "; pending " + strings.Join(f.Pending, ", ")
	}
	return s
}
