package verify_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bridgehead/bridgehead/health"
	"github.com/bridgehead/bridgehead/router"
)

// docs/troubleshooting.md has one entry (a ### heading) per thing an
// operator sees: every verify check, every reason status gives for an
// unreachable site, every gateway state, every mesh cell state, and
// every problem a gateway reports about its LAN side. This test reads
// them from the code, so a new check or reason without an entry fails
// here instead of leaving the page behind.

const troubleshooting = "../docs/troubleshooting.md"

// headings are the page's ### headings, lower case, without backticks.
func headings(t *testing.T) (map[string]bool, string) {
	t.Helper()
	b, err := os.ReadFile(troubleshooting)
	if err != nil {
		t.Fatal(err)
	}
	h := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "### "); ok {
			h[strings.ToLower(strings.TrimSpace(strings.ReplaceAll(rest, "`", "")))] = true
		}
	}
	return h, string(b)
}

func requireHeading(t *testing.T, h map[string]bool, want, from string) {
	t.Helper()
	if !h[strings.ToLower(want)] {
		t.Errorf("%s has no entry \"### %s\" (for %s)", troubleshooting, want, from)
	}
}

func parseDir(t *testing.T, dir string) []*ast.File {
	t.Helper()
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var files []*ast.File
	fset := token.NewFileSet()
	for _, e := range ents {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	return files
}

// stringConsts are the package's string constants by name, with the
// name of their declared type ("" when untyped).
func stringConsts(files []*ast.File) map[string][2]string {
	out := map[string][2]string{}
	for _, f := range files {
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				typ := ""
				if id, ok := vs.Type.(*ast.Ident); ok {
					typ = id.Name
				}
				for i, name := range vs.Names {
					if i >= len(vs.Values) {
						continue
					}
					if bl, ok := vs.Values[i].(*ast.BasicLit); ok && bl.Kind == token.STRING {
						v, _ := strconv.Unquote(bl.Value)
						out[name.Name] = [2]string{v, typ}
					}
				}
			}
		}
	}
	return out
}

// TestTroubleshootingVerifyChecks: every Check{Name: ...} built in
// package verify or below it has an entry named after the check.
func TestTroubleshootingVerifyChecks(t *testing.T) {
	h, _ := headings(t)
	names := map[string]bool{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || !d.IsDir() {
			return err
		}
		files := parseDir(t, path)
		consts := stringConsts(files)
		for _, f := range files {
			ast.Inspect(f, func(n ast.Node) bool {
				cl, ok := n.(*ast.CompositeLit)
				if !ok || !isCheckType(cl.Type) {
					return true
				}
				for _, el := range cl.Elts {
					kv, ok := el.(*ast.KeyValueExpr)
					if !ok || kv.Key.(*ast.Ident).Name != "Name" {
						continue
					}
					switch v := kv.Value.(type) {
					case *ast.BasicLit:
						s, _ := strconv.Unquote(v.Value)
						names[s] = true
					case *ast.Ident:
						c, ok := consts[v.Name]
						if !ok {
							t.Errorf("%s: check name %s is not a string constant of its package: make it one, or teach this test", path, v.Name)
						}
						names[c[0]] = true
					default:
						t.Errorf("%s: a check's name that is neither a literal nor a constant", path)
					}
				}
				return true
			})
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(names) < 10 {
		t.Fatalf("found only %d check names (%v): the walk is broken", len(names), names)
	}
	for n := range names {
		requireHeading(t, h, n, "verify check "+strconv.Quote(n))
	}
}

func isCheckType(e ast.Expr) bool {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name == "Check"
	case *ast.SelectorExpr:
		x, ok := v.X.(*ast.Ident)
		return ok && x.Name == "verify" && v.Sel.Name == "Check"
	}
	return false
}

// TestTroubleshootingSiteReasons: every reason status gives for an
// unreachable site, produced by health.Evaluate itself.
func TestTroubleshootingSiteReasons(t *testing.T) {
	h, _ := headings(t)
	now := time.Now()
	cases := [][]health.PeerState{
		nil, // no gateways configured
		{{Site: "b", Gateway: "g", LastReceive: now.Add(-5 * time.Second),
			Live: router.LivenessStats{State: router.LiveDown, Reason: router.DownNoAnswer}}},
		{{Site: "b", Gateway: "g", QueuedPackets: 1}},
		{{Site: "b", Gateway: "g"}},
	}
	src, err := os.ReadFile("../health/health.go")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(src), "sr.Reason = "); n != len(cases) {
		t.Fatalf("health.go sets a site's reason in %d places, this test knows %d: add a case for the new one, and its entry to %s", n, len(cases), troubleshooting)
	}
	seen := map[string]bool{}
	for _, peers := range cases {
		rep := health.Evaluate("a", []string{"a", "b"}, peers, now)
		reason := rep.Sites[0].Reason
		if reason == "" {
			t.Fatalf("no reason for peers %+v", peers)
		}
		key := reason
		if i := strings.IndexAny(key, ";:"); i >= 0 {
			key = key[:i]
		}
		seen[key] = true
		requireHeading(t, h, "site: "+key, "the site reason "+strconv.Quote(reason))
	}
	if len(seen) != len(cases) {
		t.Errorf("the cases gave %d distinct reasons, want %d: %v", len(seen), len(cases), seen)
	}
}

// TestTroubleshootingGatewayStates: every state in status's STATE
// column: health's gateway states, a down gateway by each of the
// router's down reasons, and MTU-degraded.
func TestTroubleshootingGatewayStates(t *testing.T) {
	h, _ := headings(t)
	n := 0
	for name, c := range stringConsts(parseDir(t, "../health")) {
		if !strings.HasPrefix(name, "State") {
			continue
		}
		n++
		if c[0] != health.StateDown {
			requireHeading(t, h, "gateway "+c[0], "health."+name)
		}
	}
	if n < 5 {
		t.Fatalf("found %d gateway states in package health", n)
	}
	reasons := 0
	for r := router.DownReason(1); r < 64; r++ {
		s := r.String()
		if s == "" {
			break
		}
		reasons++
		if s == health.StateDraining {
			continue // shown as the state draining
		}
		requireHeading(t, h, "gateway down ("+s+")", "router.DownReason "+strconv.Quote(s))
	}
	if reasons < 3 {
		t.Fatalf("found %d down reasons", reasons)
	}
	render, err := os.ReadFile("../control/render.go")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(render), "MTU-degraded") {
		t.Fatal("control/render.go no longer shows MTU-degraded: update this test and the page")
	}
	requireHeading(t, h, "gateway MTU-degraded", "status's MTU-degraded state")
}

// TestTroubleshootingMeshStates: every state of a mesh cell or link.
func TestTroubleshootingMeshStates(t *testing.T) {
	h, _ := headings(t)
	n := 0
	for name, c := range stringConsts(parseDir(t, "../mesh")) {
		if c[1] != "State" {
			continue
		}
		n++
		requireHeading(t, h, "mesh "+c[0], "mesh."+name)
	}
	if n < 4 {
		t.Fatalf("found %d mesh states", n)
	}
}

// TestTroubleshootingLANProblems: every problem a gateway reports about
// its LAN side (status's "cannot deliver to this site: ..." line) is on
// the page: each fixed part of its message appears in the page's text.
func TestTroubleshootingLANProblems(t *testing.T) {
	_, page := headings(t)
	verb := regexp.MustCompile(`%[a-z]`)
	fns := map[string]bool{"probe": true, "routedVia": true, "tick": true}
	n := 0
	for _, f := range parseDir(t, "../daemon") {
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || !fns[fd.Name.Name] || fd.Recv == nil {
				continue
			}
			ast.Inspect(fd.Body, func(x ast.Node) bool {
				call, ok := x.(*ast.CallExpr)
				if !ok || len(call.Args) == 0 {
					return true
				}
				sel, ok := call.Fun.(*ast.SelectorExpr)
				if !ok || sel.Sel.Name != "Sprintf" {
					return true
				}
				bl, ok := call.Args[0].(*ast.BasicLit)
				if !ok || bl.Kind != token.STRING {
					return true
				}
				format, _ := strconv.Unquote(bl.Value)
				n++
				for _, part := range verb.Split(format, -1) {
					part = strings.Trim(part, " :()")
					if len(part) < 4 {
						continue
					}
					if !strings.Contains(page, part) {
						t.Errorf("%s does not explain the LAN problem %q (missing %q)", troubleshooting, format, part)
					}
				}
				return true
			})
		}
	}
	if n < 5 {
		t.Fatalf("found %d LAN problem messages in package daemon", n)
	}
}
