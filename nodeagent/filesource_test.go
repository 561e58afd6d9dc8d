package nodeagent

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

// TestFileSourceScoped: node a1 takes a catalog in which another node
// (of site b, or of its own site a) is bad, without that node's route,
// and logs the skipped entry once; a bad entry of its own node or site
// refuses the catalog, the error naming the field.
func TestFileSourceScoped(t *testing.T) {
	good, err := os.ReadFile(filepath.Join("testdata", "catalog.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, old, new string
		// field: the skipped problem's field, or the refusal's.
		field   string
		refused bool
		// route: one the model has; noRoute: one it has not.
		route, noRoute string
	}{
		{name: "node of another site out of its pool", old: "podCIDR: 10.245.1.0/24", new: "podCIDR: 10.244.9.0/24",
			field: "sites[1].nodes[0].podCIDR", route: "10.244.2.0/24 via 10.224.0.12"},
		{name: "other node of its site out of the pool", old: "podCIDR: 10.244.2.0/24", new: "podCIDR: 10.245.9.0/24",
			field: "sites[0].nodes[1].podCIDR", route: "10.245.0.0/16 via 10.224.0.4", noRoute: "10.245.9.0/24"},
		{name: "its own node out of the pool", old: "podCIDR: 10.244.1.0/24", new: "podCIDR: 10.245.9.0/24",
			field: "sites[0].nodes[0].podCIDR", refused: true},
		{name: "its site's router address", old: "routerAddress: 10.224.0.4", new: "routerAddress: 10.9.0.4",
			field: "sites[0].routerAddress", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(good, []byte(tc.old)) {
				t.Fatalf("the test catalog has no %q", tc.old)
			}
			path := filepath.Join(t.TempDir(), "catalog.yaml")
			if err := os.WriteFile(path, bytes.Replace(good, []byte(tc.old), []byte(tc.new), 1), 0o644); err != nil {
				t.Fatal(err)
			}
			var logs syncbuf.Buffer
			s := &FileSource{path: path, node: "a1", log: slog.New(slog.NewTextHandler(&logs, nil)), changed: make(chan struct{}, 1)}
			for range 2 {
				d, err := s.Load()
				if tc.refused {
					if err == nil || !strings.Contains(err.Error(), tc.field) {
						t.Fatalf("Load: %v, want a refusal naming %s", err, tc.field)
					}
					continue
				}
				if err != nil {
					t.Fatalf("Load: %v", err)
				}
				var routes []string
				for _, r := range d.Routes {
					routes = append(routes, r.String())
				}
				all := strings.Join(routes, "\n")
				if !strings.Contains(all, tc.route) || tc.noRoute != "" && strings.Contains(all, tc.noRoute) {
					t.Errorf("routes, want %q and no %q:\n%s", tc.route, tc.noRoute, all)
				}
			}
			if tc.refused {
				return
			}
			if n := strings.Count(logs.String(), "catalog entries skipped"); n != 1 || !strings.Contains(logs.String(), tc.field) {
				t.Errorf("%d log lines of skipped entries over two loads, want one naming %s:\n%s", n, tc.field, logs.String())
			}
		})
	}
}
