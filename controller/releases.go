package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/controller/ipam"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// The leader records the blocks of deleted Nodes that are in their release
// grace in one ConfigMap of --namespace, so that a new leader (after a
// restart or a failover), which rebuilds from the Nodes that still exist,
// keeps them out of the pool until the grace that began with the delete
// ends. See the package doc.
const (
	// ReleasesName is the ConfigMap's name.
	ReleasesName = "bridgehead-releases"
	// releasesKey is its data key: one line per node, sorted by expiry,
	// "<node> <site> <expires, RFC 3339> <cidr>[,<cidr>]".
	releasesKey = "released"
	releaseQKey = "releases"
)

// encodeReleases renders rs as the ConfigMap's data.
func encodeReleases(rs []ipam.Released) string {
	var b strings.Builder
	for _, r := range rs {
		cidrs := make([]string, len(r.CIDRs))
		for i, c := range r.CIDRs {
			cidrs[i] = c.String()
		}
		fmt.Fprintf(&b, "%s %s %s %s\n", r.Node, r.Site, r.Expires.UTC().Format(time.RFC3339Nano), strings.Join(cidrs, ","))
	}
	return b.String()
}

// decodeReleases parses the ConfigMap's data. A bad line is an error
// naming it (line number and field) and is left out; the others are
// returned.
func decodeReleases(data string) ([]ipam.Released, error) {
	var out []ipam.Released
	var errs []error
	for i, line := range strings.Split(data, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		bad := func(format string, a ...any) {
			errs = append(errs, fmt.Errorf("%s line %d: %s", releasesKey, i+1, fmt.Sprintf(format, a...)))
		}
		f := strings.Fields(line)
		if len(f) != 4 {
			bad("want 4 fields (node site expires cidrs), got %d", len(f))
			continue
		}
		exp, err := time.Parse(time.RFC3339Nano, f[2])
		if err != nil {
			bad("expires %q: not an RFC 3339 time", f[2])
			continue
		}
		r := ipam.Released{Node: f[0], Site: f[1], Expires: exp}
		for _, s := range strings.Split(f[3], ",") {
			p, err := netip.ParsePrefix(s)
			if err != nil {
				bad("cidrs: %q is not a CIDR", s)
				r.CIDRs = nil
				break
			}
			r.CIDRs = append(r.CIDRs, p)
		}
		if r.CIDRs != nil {
			out = append(out, r)
		}
	}
	return out, errors.Join(errs...)
}

// restoreReleases reads the ConfigMap and puts its blocks back in their
// grace (after the allocator's Rebuild). A missing ConfigMap is no
// release; a bad line or a block that cannot be restored is logged.
func (c *Controller) restoreReleases(ctx context.Context) error {
	cm, err := c.client.CoreV1().ConfigMaps(c.opts.Namespace).Get(ctx, ReleasesName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		c.releasesExist = false
		return nil
	}
	if err != nil {
		return fmt.Errorf("configmap %s/%s: %w", c.opts.Namespace, ReleasesName, err)
	}
	c.releasesExist = true
	c.releasesWritten = cm.Data[releasesKey]
	rs, err := decodeReleases(cm.Data[releasesKey])
	if err != nil {
		c.log.Warn("release graces: lines left out", "configmap", c.opts.Namespace+"/"+ReleasesName, "err", err)
	}
	probs := c.alloc.Restore(rs)
	for _, p := range probs {
		c.log.Warn("release grace not restored", "configmap", c.opts.Namespace+"/"+ReleasesName, "problem", p.String())
	}
	live := 0
	now := c.now()
	for _, r := range rs {
		if r.Expires.After(now) {
			live++
		}
	}
	c.log.Info("release graces restored", "configmap", c.opts.Namespace+"/"+ReleasesName, "in_grace", live-len(probs), "recorded", len(rs))
	return nil
}

// reconcileReleases writes the blocks in their grace to the ConfigMap
// when they differ from what this leader last wrote or read. One worker
// runs it (releasesWritten and releasesExist are its own).
func (c *Controller) reconcileReleases(ctx context.Context, _ string) error {
	data := encodeReleases(c.alloc.Pending())
	if c.releasesExist && data == c.releasesWritten {
		return nil
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: ReleasesName, Namespace: c.opts.Namespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": "bridgehead", "app.kubernetes.io/managed-by": component}},
		Data: map[string]string{releasesKey: data},
	}
	cms := c.client.CoreV1().ConfigMaps(c.opts.Namespace)
	var err error
	if c.releasesExist {
		// The leader is the only writer: an unconditional update.
		_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: component})
		if apierrors.IsNotFound(err) {
			c.releasesExist = false
		}
	}
	if !c.releasesExist {
		_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: component})
		if apierrors.IsAlreadyExists(err) {
			c.releasesExist = true // the next try updates
		}
	}
	c.countWrite("configmap", err)
	if err != nil {
		return err
	}
	c.releasesExist, c.releasesWritten = true, data
	return nil
}

// publishedNodes reads from the cache the nodes the published catalog
// lists, with their site and blocks. lead calls it before its catalog
// worker starts, which would publish the catalog without the nodes
// deleted since.
func (c *Controller) publishedNodes() []ipam.Released {
	if c.opts.ReleaseGrace <= 0 {
		return nil
	}
	cms := c.configMaps.ConfigMaps(c.opts.Namespace)
	base, err := cms.Get(catalog.BaseName)
	if err != nil {
		return nil // nothing published yet
	}
	_, refs, err := catalog.DecodeBase(base)
	if err != nil {
		c.log.Warn("release graces: the published catalog is unreadable", "err", err)
		return nil
	}
	var rs []ipam.Released
	for site, list := range refs {
		for _, ref := range list {
			cm, err := cms.Get(ref.Name)
			if err != nil {
				continue
			}
			nodes, err := catalog.DecodeNodes([]byte(cm.Data[catalog.NodesKey]))
			if err != nil {
				c.log.Warn("release graces: a catalog slice is unreadable", "configmap", ref.Name, "err", err)
				continue
			}
			for _, n := range nodes {
				r := ipam.Released{Node: n.Name, Site: site}
				for _, p := range []netip.Prefix{n.PodCIDR, n.PodCIDR6} {
					if p.IsValid() {
						r.CIDRs = append(r.CIDRs, p)
					}
				}
				if len(r.CIDRs) > 0 {
					rs = append(rs, r)
				}
			}
		}
	}
	return rs
}

// releaseUnrecorded starts, now, the grace of the blocks of published
// nodes that no longer exist and that no recorded grace covers: nodes
// deleted while no replica led, or before the last leader recorded them.
// Called after restoreReleases, so a recorded grace keeps its end.
func (c *Controller) releaseUnrecorded(published []ipam.Released, exists map[string]bool) {
	expires := c.now().Add(c.opts.ReleaseGrace)
	var rs []ipam.Released
	for _, r := range published {
		if !exists[r.Node] {
			r.Expires = expires
			rs = append(rs, r)
		}
	}
	if len(rs) == 0 {
		return
	}
	before := len(c.alloc.Pending())
	probs := c.alloc.Restore(rs)
	c.log.Info("release graces started for nodes deleted unseen (in the published catalog, not in the Nodes)",
		"nodes", len(c.alloc.Pending())-before, "not_restored", len(probs), "grace", c.opts.ReleaseGrace)
}
