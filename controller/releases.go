package controller

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/bridgehead/bridgehead/controller/ipam"
	"github.com/bridgehead/bridgehead/kube/catalog"
)

// The leader records the blocks of deleted Nodes that are in their release
// grace in ConfigMaps of --namespace (shards), so that a new leader (after
// a restart or a failover), which rebuilds from the Nodes that still
// exist, keeps them out of the pool until the grace that began with the
// delete ends. See the package doc.
//
// A node's line goes to shard fnv32a(node) mod N, N a power of two, the
// least for which every shard's data stays within maxReleasesShardBytes:
// a line never moves while N stays, and when N doubles or halves a line
// moves only between shards i and i+N/2. Shards are written from the
// highest to the lowest, and the shards no longer used deleted last, so
// a leader stopped halfway leaves some lines in two shards (read once)
// and none in no shard.
const (
	// ReleasesName is shard 0's name; shard i > 0 is ReleasesName-<i>.
	ReleasesName = "bridgehead-releases"
	// ReleasesLabel marks the shards (a List finds them; the
	// controller's RBAC grants get by name for shard 0 only).
	ReleasesLabel = "bridgehead.io/releases"
	// releasesKey is each shard's data key: one line per node, sorted by
	// expiry, "<node> <site> <expires, RFC 3339> <cidr>[,<cidr>]".
	releasesKey = "released"
	releaseQKey = "releases"
	// maxReleasesShardBytes bounds one shard's data: the API server
	// refuses a ConfigMap of more than 1 MiB (and etcd a request of more
	// than 1.5 MiB). A line is at most about 410 bytes (a 253-byte node
	// name, a 63-byte site name), so one always fits.
	maxReleasesShardBytes = 512 << 10
)

// releasesShardName is shard i's ConfigMap name.
func releasesShardName(i int) string {
	if i == 0 {
		return ReleasesName
	}
	return fmt.Sprintf("%s-%d", ReleasesName, i)
}

// shardReleases splits rs (kept in order) into the fewest shards, a power
// of two, whose encoded data each stays within limit bytes.
func shardReleases(rs []ipam.Released, limit int) []string {
	lines := make([]string, len(rs))
	hashes := make([]uint32, len(rs))
	total := 0
	for i, r := range rs {
		lines[i] = encodeReleases(rs[i : i+1])
		h := fnv.New32a()
		h.Write([]byte(r.Node))
		hashes[i] = h.Sum32()
		total += len(lines[i])
	}
	n := 1
	for n < (total+limit-1)/limit {
		n *= 2
	}
	for {
		shards := make([]strings.Builder, n)
		fits := true
		for i, l := range lines {
			b := &shards[hashes[i]%uint32(n)]
			b.WriteString(l)
			fits = fits && b.Len() <= limit
		}
		if fits || n >= 1<<16 {
			out := make([]string, n)
			for i := range shards {
				out[i] = shards[i].String()
			}
			return out
		}
		n *= 2
	}
}

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

// restoreReleases reads the shards and puts their blocks back in their
// grace (after the allocator's Rebuild). No shard is no release; a bad
// line or a block that cannot be restored is logged.
func (c *Controller) restoreReleases(ctx context.Context) error {
	cms := c.client.CoreV1().ConfigMaps(c.opts.Namespace)
	list, err := cms.List(ctx, metav1.ListOptions{LabelSelector: ReleasesLabel})
	if err != nil {
		return fmt.Errorf("configmaps %s/%s*: %w", c.opts.Namespace, ReleasesName, err)
	}
	c.releaseShards = map[string]string{}
	var rs []ipam.Released
	read := func(cm *corev1.ConfigMap) {
		c.releaseShards[cm.Name] = cm.Data[releasesKey]
		got, err := decodeReleases(cm.Data[releasesKey])
		if err != nil {
			c.log.Warn("release graces: lines left out", "configmap", c.opts.Namespace+"/"+cm.Name, "err", err)
		}
		rs = append(rs, got...)
	}
	for i := range list.Items {
		read(&list.Items[i])
	}
	if _, ok := c.releaseShards[ReleasesName]; !ok {
		// Written before the shards had a label.
		cm, err := cms.Get(ctx, ReleasesName, metav1.GetOptions{})
		switch {
		case err == nil:
			read(cm)
		case !apierrors.IsNotFound(err):
			return fmt.Errorf("configmap %s/%s: %w", c.opts.Namespace, ReleasesName, err)
		}
	}
	// A node in two shards (a write stopped halfway) is restored once:
	// Restore skips a node already in its grace.
	probs := c.alloc.Restore(rs)
	for _, p := range probs {
		c.log.Warn("release grace not restored", "configmap", c.opts.Namespace+"/"+ReleasesName, "problem", p.String())
	}
	live := map[string]bool{}
	now := c.now()
	for _, r := range rs {
		if r.Expires.After(now) {
			live[r.Node] = true
		}
	}
	c.log.Info("release graces restored", "configmap", c.opts.Namespace+"/"+ReleasesName, "shards", len(c.releaseShards),
		"in_grace", len(live)-len(probs), "recorded", len(rs))
	return nil
}

// enqueueReleases schedules a write of the release shards: at once when
// the last write ended at least CatalogInterval ago, else when that
// interval is over; a burst of deletes makes one write.
func (c *Controller) enqueueReleases() {
	c.releaseQueue.AddAfter(releaseQKey, c.releaseWait())
}

// releaseWait is how long the next write of the shards must wait.
func (c *Controller) releaseWait() time.Duration {
	return c.releasePace.wait(c.opts.CatalogInterval, time.Now())
}

// reconcileReleases writes the shards (writeReleases) on the release
// queue's one worker, at most once per CatalogInterval after a write
// (counted from its end), so no shard is written more often under churn.
func (c *Controller) reconcileReleases(ctx context.Context, _ string) error {
	if wait := c.releaseWait(); wait > 0 {
		c.releaseQueue.AddAfter(releaseQKey, wait)
		return nil
	}
	return c.writeReleases(ctx)
}

// writeReleases writes the blocks in their grace to the shards whose
// data differs from what this leader last wrote or read, from the highest
// shard to the lowest, then deletes the shards no longer used. The
// release worker runs it, and the lead's end once that worker has
// stopped (releaseShards is theirs).
func (c *Controller) writeReleases(ctx context.Context) error {
	shards := shardReleases(c.alloc.Pending(), maxReleasesShardBytes)
	if len(shards) == 1 && shards[0] == "" && len(c.releaseShards) == 0 {
		return nil // nothing recorded, nothing to record
	}
	wrote := false
	defer func() {
		if wrote {
			c.releasePace.done(time.Now())
		}
	}()
	cms := c.client.CoreV1().ConfigMaps(c.opts.Namespace)
	for i := len(shards) - 1; i >= 0; i-- {
		name := releasesShardName(i)
		written, exists := c.releaseShards[name]
		if exists && written == shards[i] {
			continue
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.opts.Namespace,
				Labels: map[string]string{"app.kubernetes.io/part-of": "bridgehead", "app.kubernetes.io/managed-by": component, ReleasesLabel: ""}},
			Data: map[string]string{releasesKey: shards[i]},
		}
		var err error
		wrote = true
		if exists {
			// The leader is the only writer: an unconditional update.
			_, err = cms.Update(ctx, cm, metav1.UpdateOptions{FieldManager: component})
			if apierrors.IsNotFound(err) {
				exists = false
			}
		}
		if !exists {
			_, err = cms.Create(ctx, cm, metav1.CreateOptions{FieldManager: component})
			if apierrors.IsAlreadyExists(err) {
				c.releaseShards[name] = "\x00" // exists, content unknown: the next try updates
			}
		}
		c.countWrite("configmap", err)
		if err != nil {
			return fmt.Errorf("configmap %s/%s: %w", c.opts.Namespace, name, err)
		}
		c.releaseShards[name] = shards[i]
	}
	for name := range c.releaseShards {
		if i, ok := releasesShardIndex(name); ok && i < len(shards) {
			continue
		}
		wrote = true
		err := cms.Delete(ctx, name, metav1.DeleteOptions{})
		if apierrors.IsNotFound(err) {
			err = nil
		}
		c.countWrite("configmap", err)
		if err != nil {
			return fmt.Errorf("configmap %s/%s: %w", c.opts.Namespace, name, err)
		}
		delete(c.releaseShards, name)
	}
	return nil
}

// releasesShardIndex is the shard number of a shard's name.
func releasesShardIndex(name string) (int, bool) {
	if name == ReleasesName {
		return 0, true
	}
	n, ok := strings.CutPrefix(name, ReleasesName+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(n)
	return i, err == nil && i > 0 && releasesShardName(i) == name
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
	refs, err := catalog.Refs(base, func(name string) *corev1.ConfigMap {
		cm, _ := cms.Get(name)
		return cm
	})
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
