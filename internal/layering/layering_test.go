package layering

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
)

// module is the import path every package below is relative to.
const module = "github.com/bridgehead/bridgehead"

// layer is one row of the map: the packages in it may import those in
// its own layer and the layers before it, never those after it.
// A pattern is a path relative to the module: "x" is that package,
// "x/..." is x and everything under it. The longest matching pattern
// names a package's layer, so "router" and "router/..." can sit in
// different layers.
type layer struct {
	name     string
	patterns []string
}

// layers is bridgehead's package map, bottom first (doc.go at the module
// root tells it in words). Imports within a layer are allowed: Go itself
// forbids cycles, and what this test forbids is an import that runs up.
var layers = []layer{
	{"base: parsing, helpers and API types that import nothing of ours above them", []string{
		"packet", "ratelimit", "steer", "mesh", "sdnotify", "netsetup",
		"internal/...", "kube/apis/...", "controller/ipam", "controller/azureroutes/armfake",
	}},
	{"router parts: the router's leaves (one job each, never the Router)", []string{"router/..."}},
	{"crypto and sockets: Noise sealing, the UDP bind, the TUN device, the relay", []string{"crypto/...", "udp/...", "tun/...", "relay/..."}},
	{"transport: the transit header and the kernel's early drop", []string{"transit/...", "earlydrop/..."}},
	{"router: the forwarding core", []string{"router"}},
	{"router readers: health and the control socket", []string{"health/...", "control/..."}},
	{"config: the configuration and what is rendered from it", []string{"config/...", "noderoutes/..."}},
	{"kubernetes: resources to and from config, the controller and the node agent", []string{"kube/...", "controller/...", "nodeagent/..."}},
	{"daemon: wires the data path and the control plane together", []string{"daemon/..."}},
	{"verify: checks a running gateway from outside", []string{"verify/..."}},
	{"commands", []string{"cmd/..."}},
	{"test helpers: setups that import the packages they set up, for tests only", []string{"internal/gatewaytest"}},
	{"top: benchmarks, end-to-end tests, deployment, generated docs and the package map; nothing imports them", []string{
		"bench/...", "e2e/...", "deploy/...", "hack/...", "internal/docgen", ".",
	}},
}

// layerOf returns the index in ls of the layer of pkg (relative to the
// module, "." for the module root), or -1.
func layerOf(ls []layer, pkg string) int {
	best, bestLen := -1, -1
	for i, l := range ls {
		for _, p := range l.patterns {
			n := -1
			if base, ok := strings.CutSuffix(p, "/..."); ok {
				if pkg == base || strings.HasPrefix(pkg, base+"/") {
					n = len(base)
				}
			} else if pkg == p {
				n = len(p) + 1 // an exact name beats a subtree of the same name
			}
			if n > bestLen {
				best, bestLen = i, n
			}
		}
	}
	return best
}

// violations checks graph (importer → its non-test imports, both relative
// to the module; imports from outside the module are skipped by the
// caller) against ls and returns one line per package in no layer and
// per import that runs up, sorted.
func violations(ls []layer, graph map[string][]string) []string {
	var out []string
	for pkg, imports := range graph {
		from := layerOf(ls, pkg)
		if from < 0 {
			out = append(out, fmt.Sprintf("%s is in no layer: add it to the table in internal/layering", pkg))
			continue
		}
		for _, imp := range imports {
			to := layerOf(ls, imp)
			switch {
			case to < 0:
				out = append(out, fmt.Sprintf("%s imports %s, which is in no layer", pkg, imp))
			case to > from:
				out = append(out, fmt.Sprintf("%s (layer %q) imports %s (layer %q), which is above it", pkg, ls[from].name, imp, ls[to].name))
			}
		}
	}
	slices.Sort(out)
	return out
}

// TestViolations: the checker on made-up graphs, each with the lines it
// must report.
func TestViolations(t *testing.T) {
	for _, tc := range []struct {
		name  string
		graph map[string][]string
		want  []string
	}{
		{"clean: each import runs down or sideways", map[string][]string{
			"tun":            {"packet", "internal/threadwait"},
			"router":         {"tun", "udp", "crypto", "router/fq", "router/lpm", "transit", "packet"},
			"router/fq":      {"packet"},
			"health":         {"router"},
			"daemon":         {"router", "config", "kube/follow", "health"},
			"cmd/bridgehead": {"daemon", "config"},
			"crypto":         {"udp"}, // sideways: allowed
		}, nil},
		{"tun imports the router", map[string][]string{
			"tun": {"packet", "router"},
		}, []string{`tun (layer "crypto and sockets: Noise sealing, the UDP bind, the TUN device, the relay") imports router (layer "router: the forwarding core"), which is above it`}},
		{"a router part imports the router", map[string][]string{
			"router/lpm": {"router"},
		}, []string{`router/lpm (layer "router parts: the router's leaves (one job each, never the Router)") imports router (layer "router: the forwarding core"), which is above it`}},
		{"the router imports config, the daemon imports a benchmark", map[string][]string{
			"router": {"config"},
			"daemon": {"bench/internal/lab"},
		}, []string{
			`daemon (layer "daemon: wires the data path and the control plane together") imports bench/internal/lab (layer "top: benchmarks, end-to-end tests, deployment, generated docs and the package map; nothing imports them"), which is above it`,
			`router (layer "router: the forwarding core") imports config (layer "config: the configuration and what is rendered from it"), which is above it`,
		}},
		{"a package in no layer, and an import of one", map[string][]string{
			"newthing": nil,
			"daemon":   {"otherthing"},
		}, []string{
			"daemon imports otherthing, which is in no layer",
			"newthing is in no layer: add it to the table in internal/layering",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := violations(layers, tc.graph)
			if !slices.Equal(got, tc.want) {
				t.Errorf("violations:\n  %s\nwant:\n  %s", strings.Join(got, "\n  "), strings.Join(tc.want, "\n  "))
			}
		})
	}
}

// TestLayerOf: the longest pattern wins, and a subtree pattern does not
// match a sibling that merely shares its prefix.
func TestLayerOf(t *testing.T) {
	ls := []layer{{"a", []string{"router/..."}}, {"b", []string{"router"}}, {"c", []string{"controller/ipam"}}, {"d", []string{"controller/..."}}}
	for pkg, want := range map[string]int{
		"router": 1, "router/fq": 0, "router/fq/deep": 0, "routerx": -1,
		"controller": 3, "controller/ipam": 2, "controller/ipamx": 3, ".": -1,
	} {
		if got := layerOf(ls, pkg); got != want {
			t.Errorf("layerOf(%q) = %d, want %d", pkg, got, want)
		}
	}
}

// TestImportsRunDown reads the module's real import graph (non-test
// imports: a test may reach up for fixtures) and fails on every package
// in no layer and every import that runs up.
func TestImportsRunDown(t *testing.T) {
	graph, err := moduleGraph()
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"router", "router/lpm", "tun", "daemon", "cmd/bridgehead"} {
		if _, ok := graph[want]; !ok {
			t.Fatalf("go list did not list %s: the graph read is incomplete (%d packages)", want, len(graph))
		}
	}
	for _, v := range violations(layers, graph) {
		t.Error(v)
	}
}

// moduleGraph runs go list over the module and returns each package's
// imports within the module, relative to it ("." for the root package).
func moduleGraph() (map[string][]string, error) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		goBin = filepath.Join(runtime.GOROOT(), "bin", "go")
	}
	cmd := exec.Command(goBin, "list", "-e", "-json=ImportPath,Imports,Error", module+"/...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list: %v: %s", err, stderr.Bytes())
	}
	rel := func(p string) (string, bool) {
		if p == module {
			return ".", true
		}
		r, ok := strings.CutPrefix(p, module+"/")
		return r, ok
	}
	graph := make(map[string][]string)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p struct {
			ImportPath string
			Imports    []string
			Error      *struct{ Err string }
		}
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			return nil, fmt.Errorf("go list output: %w", err)
		}
		pkg, ok := rel(p.ImportPath)
		if !ok {
			continue
		}
		if p.Error != nil && len(p.Imports) == 0 {
			// A package that does not load (another change under way)
			// has no imports to check; say so rather than pass it.
			return nil, fmt.Errorf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		var imps []string
		for _, imp := range p.Imports {
			if r, ok := rel(imp); ok {
				imps = append(imps, r)
			}
		}
		graph[pkg] = imps
	}
	return graph, nil
}
