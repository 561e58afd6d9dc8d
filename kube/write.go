package kube

import (
	"fmt"
	"io"

	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"
)

// WriteResources writes r as multi-document YAML for `kubectl apply -f`:
// Sites, then Gateways, then (withNodes) the Nodes. Empty status and the
// creation timestamp are left out. Nodes are for loading a catalog into a
// test cluster; in a real one the kubelets register them.
func WriteResources(w io.Writer, r *Resources, withNodes bool) error {
	return WriteObjects(w, r.Objects(withNodes, false))
}

// Objects lists r's objects: Sites, Gateways, (withNodes) Nodes, and
// (withRBAC) each Gateway's ServiceAccount and ClusterRole (GatewayRBAC).
func (r *Resources) Objects(withNodes, withRBAC bool) []runtime.Object {
	var objs []runtime.Object
	for i := range r.Sites {
		objs = append(objs, &r.Sites[i])
	}
	for i := range r.Gateways {
		objs = append(objs, &r.Gateways[i])
	}
	if withNodes {
		for i := range r.Nodes {
			objs = append(objs, &r.Nodes[i])
		}
	}
	if withRBAC {
		for _, g := range r.Gateways {
			objs = append(objs, GatewayRBAC(g.Name)...)
		}
	}
	return objs
}

// WriteObjects writes objects as multi-document YAML, without empty
// status or creation timestamps.
func WriteObjects(w io.Writer, objs []runtime.Object) error {
	for i, o := range objs {
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(o)
		if err != nil {
			return fmt.Errorf("write resources: %w", err)
		}
		if md, ok := m["metadata"].(map[string]any); ok {
			delete(md, "creationTimestamp")
		}
		if st, ok := m["status"].(map[string]any); ok && len(st) == 0 {
			delete(m, "status")
		}
		data, err := yaml.Marshal(m)
		if err != nil {
			return fmt.Errorf("write resources: %w", err)
		}
		if i > 0 {
			if _, err := io.WriteString(w, "---\n"); err != nil {
				return err
			}
		}
		if _, err := w.Write(data); err != nil {
			return err
		}
	}
	return nil
}
