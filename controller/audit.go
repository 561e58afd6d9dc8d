package controller

import (
	"context"
	"fmt"
	"net/netip"
	"sort"

	corev1 "k8s.io/api/core/v1"
)

// auditState is what the last audit found; only the audit goroutine of
// the lead touches it.
type auditState struct {
	pairs map[string]bool // "node/node/block" of each double allocation
}

// auditLoop audits at the start of the lead and then every AuditInterval
// of the injected clock, until ctx ends.
func (c *Controller) auditLoop(ctx context.Context) {
	t := c.clock.NewTicker(c.opts.AuditInterval)
	defer t.Stop()
	st := &auditState{}
	c.audit(st)
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			c.audit(st)
		}
	}
}

// audit finds every pod block recorded by two Nodes (the annotation, else
// spec.podCIDRs), from the Node cache, whatever the allocator holds: the
// backstop for what optimistic concurrency cannot refuse (two leaders
// giving one block to two Nodes that neither had written before). It sets
// bridgehead_controller_double_allocations, logs when the count changes
// and records a Warning Event on both Nodes of each new pair.
func (c *Controller) audit(st *auditState) {
	nodes, err := c.nodes.List(everything())
	if err != nil {
		c.log.Error("audit: list nodes from cache", "err", err)
		return
	}
	type claim struct {
		p    netip.Prefix
		node *corev1.Node
	}
	var all []claim
	for _, n := range nodes {
		rec, _ := recorded(n)
		for _, p := range rec {
			all = append(all, claim{p.Masked(), n})
		}
	}
	// Prefixes overlap only by nesting: sorted by address, shorter first,
	// a prefix overlaps exactly the following ones that start within it.
	sort.Slice(all, func(i, j int) bool {
		if c := all[i].p.Addr().Compare(all[j].p.Addr()); c != 0 {
			return c < 0
		}
		if all[i].p.Bits() != all[j].p.Bits() {
			return all[i].p.Bits() < all[j].p.Bits()
		}
		return all[i].node.Name < all[j].node.Name
	})
	pairs := map[string]bool{}
	var fresh []string
	for i := range all {
		last := lastAddr(all[i].p)
		for j := i + 1; j < len(all) && all[j].p.Addr().BitLen() == last.BitLen() && all[j].p.Addr().Compare(last) <= 0; j++ {
			a, b := all[i], all[j]
			if a.node.Name == b.node.Name {
				continue
			}
			key := a.node.Name + "/" + b.node.Name + "/" + a.p.String() + "/" + b.p.String()
			pairs[key] = true
			if st.pairs[key] {
				continue
			}
			msg := fmt.Sprintf("pod block %s of node %s overlaps %s of node %s: their pods may share addresses; drain and delete one of them so that it rejoins with a new range", a.p, a.node.Name, b.p, b.node.Name)
			fresh = append(fresh, msg)
			c.recorder.Eventf(a.node, nil, corev1.EventTypeWarning, "DoubleAllocation", "Audit", "%s", msg)
			c.recorder.Eventf(b.node, nil, corev1.EventTypeWarning, "DoubleAllocation", "Audit", "%s", msg)
		}
	}
	c.metrics.doubleAllocs.Set(float64(len(pairs)))
	if len(pairs) != len(st.pairs) || len(fresh) > 0 {
		if len(pairs) > 0 {
			c.log.Warn("audit: pod blocks held by two nodes", "double_allocations", len(pairs), "was", len(st.pairs), "new", fresh)
		} else {
			c.log.Info("audit: no pod block is held by two nodes any more", "was", len(st.pairs))
		}
	}
	st.pairs = pairs
}
