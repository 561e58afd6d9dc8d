package main

import (
	"bufio"
	"flag"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
)

var updateCompatFields = flag.Bool("update-compat-fields", false, "rewrite testdata/previous-release-fields.txt from the previous release's source")

// repoRootDir is the repository root, two levels above this package.
func repoRootDir(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

var (
	changelogRelease = regexp.MustCompile(`^## (v[0-9]+\.[0-9]+\.[0-9]+(?:-[0-9A-Za-z.-]+)?)(?:\s|$)`)
	changelogCommit  = regexp.MustCompile("^Commit: `?([0-9a-f]{40})`?\\s*$")
)

// changelogPrevious is the newest release of CHANGELOG.md and its
// commit (docs/operations/releasing.md: the first "## vX.Y.Z" heading and its
// "Commit:" line; e2e's previousRelease reads them the same way).
func changelogPrevious(t *testing.T) (version, commit string) {
	t.Helper()
	f, err := os.Open(filepath.Join(repoRootDir(t), "CHANGELOG.md"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if m := changelogRelease.FindStringSubmatch(line); m != nil {
			if version != "" {
				break
			}
			version = m[1]
		} else if m := changelogCommit.FindStringSubmatch(line); m != nil && version != "" {
			return version, m[1]
		}
	}
	t.Fatalf("CHANGELOG.md names no release with a Commit: line (found %q)", version)
	return "", ""
}

// gitConfigSource reads the Go files (tests aside) of package config at
// commit from this clone's history.
func gitConfigSource(t *testing.T, commit string) map[string][]byte {
	t.Helper()
	root := repoRootDir(t)
	out, err := exec.Command("git", "-C", root, "ls-tree", "--name-only", commit, "config/").CombinedOutput()
	if err != nil {
		shallow, _ := exec.Command("git", "-C", root, "rev-parse", "--is-shallow-repository").Output()
		t.Fatalf("commit %s (CHANGELOG.md's previous release) is not readable in this clone (shallow: %s): %v\n%s"+
			"the field list is derived from that release's source: fetch its history (git fetch --unshallow)",
			commit, strings.TrimSpace(string(shallow)), err, out)
	}
	files := map[string][]byte{}
	for _, name := range strings.Fields(string(out)) {
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := exec.Command("git", "-C", root, "show", commit+":"+name).Output()
		if err != nil {
			t.Fatalf("git show %s:%s: %v", commit, name, err)
		}
		files[name] = src
	}
	if len(files) == 0 {
		t.Fatalf("no Go files in config/ at %s", commit)
	}
	return files
}

// dirConfigSource reads the Go files (tests aside) of this tree's config.
func dirConfigSource(t *testing.T) map[string][]byte {
	t.Helper()
	dir := filepath.Join(repoRootDir(t), "config")
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		files[name] = src
	}
	return files
}

// sourceFieldPaths is fieldPaths read from a config package's source
// (go/ast, nothing compiled): the field paths of its type Config, by the
// same rules (a struct with yaml-tagged fields is a mapping, a slice of
// one a list of mappings, anything else a value).
func sourceFieldPaths(t *testing.T, files map[string][]byte) []string {
	t.Helper()
	types := map[string]ast.Expr{}
	fset := token.NewFileSet()
	for name, src := range files {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			t.Fatal(err)
		}
		for _, decl := range f.Decls {
			if g, ok := decl.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					ts := s.(*ast.TypeSpec)
					types[ts.Name.Name] = ts.Type
				}
			}
		}
	}
	// resolve follows pointers and the package's own type names.
	var resolve func(e ast.Expr, depth int) ast.Expr
	resolve = func(e ast.Expr, depth int) ast.Expr {
		switch x := e.(type) {
		case *ast.ParenExpr:
			return resolve(x.X, depth)
		case *ast.StarExpr:
			return resolve(x.X, depth)
		case *ast.Ident:
			if def, ok := types[x.Name]; ok && depth < 32 {
				return resolve(def, depth+1)
			}
		}
		return e
	}
	tagged := func(st *ast.StructType) []struct {
		name string
		typ  ast.Expr
	} {
		var out []struct {
			name string
			typ  ast.Expr
		}
		for _, f := range st.Fields.List {
			if f.Tag == nil {
				continue
			}
			tag, err := strconv.Unquote(f.Tag.Value)
			if err != nil {
				t.Fatal(err)
			}
			if name := yamlName(reflect.StructTag(tag).Get("yaml")); name != "" {
				out = append(out, struct {
					name string
					typ  ast.Expr
				}{name, f.Type})
			}
		}
		return out
	}
	isMapping := func(e ast.Expr) bool {
		st, ok := resolve(e, 0).(*ast.StructType)
		return ok && len(tagged(st)) > 0
	}
	var out []string
	var walk func(e ast.Expr, prefix string, depth int)
	walk = func(e ast.Expr, prefix string, depth int) {
		if depth > 32 {
			t.Fatalf("%s: types nest deeper than 32", prefix)
		}
		switch x := resolve(e, 0).(type) {
		case *ast.ArrayType:
			if isMapping(x.Elt) {
				walk(x.Elt, prefix+"[]", depth+1)
			}
		case *ast.StructType:
			for _, f := range tagged(x) {
				p := joinField(prefix, f.name)
				out = append(out, p)
				walk(f.typ, p, depth+1)
			}
		}
	}
	if _, ok := types["Config"]; !ok {
		t.Fatal("the config package has no type Config")
	}
	walk(ast.NewIdent("Config"), "", 0)
	sort.Strings(out)
	return out
}

// formatReleaseFields is the stored list's text.
func formatReleaseFields(version, commit string, paths []string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# The config's YAML field paths that release %s knows (its type config.Config's\n", version)
	b.WriteString("# yaml tags; list elements are \"[]\"). `bridgehead check` warns about a field\n")
	b.WriteString("# outside them: that release's gateways refuse it. Generated from the release's\n")
	b.WriteString("# commit by: go test ./cmd/bridgehead -run TestPreviousReleaseFields -args -update-compat-fields\n")
	fmt.Fprintf(&b, "release %s %s\n", version, commit)
	for _, p := range paths {
		b.WriteString(p + "\n")
	}
	return b.String()
}

// TestPreviousReleaseFields: the stored list is the one CHANGELOG.md's
// previous release's source gives. A new release (a new "## vX.Y.Z" with
// its commit) makes it stale until it is regenerated.
func TestPreviousReleaseFields(t *testing.T) {
	version, commit := changelogPrevious(t)
	want := formatReleaseFields(version, commit, sourceFieldPaths(t, gitConfigSource(t, commit)))
	const file = "testdata/previous-release-fields.txt"
	if *updateCompatFields {
		if err := os.WriteFile(file, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s for %s (%.12s)", file, version, commit)
		return
	}
	if previousReleaseFieldsFile != want {
		t.Errorf("%s is stale: CHANGELOG.md's previous release is %s (%.12s), and its source gives another list than the stored one (of %s, %.12s); "+
			"run go test ./cmd/bridgehead -run TestPreviousReleaseFields -args -update-compat-fields", file, version, commit,
			previousReleaseFields.version, previousReleaseFields.commit)
	}
	t.Logf("%s (%.12s) knows %d field paths; this tree's config knows %d", version, commit, len(previousReleaseFields.paths), len(currentFields()))
}

// TestFieldPathsSourceAndReflection: the go/ast reading that made the
// stored list gives, on this tree's config source, what reflection gives
// on the compiled type: the generator reads a struct as check does.
func TestFieldPathsSourceAndReflection(t *testing.T) {
	src := sourceFieldPaths(t, dirConfigSource(t))
	refl := fieldPaths(reflect.TypeFor[config.Config]())
	if !slices.Equal(src, refl) {
		t.Errorf("config's source and its compiled type give different field paths:\nsource     %v\nreflection %v", src, refl)
	}
	if len(refl) < 50 || !slices.Contains(refl, "sites[].gateways[].publicKey") {
		t.Errorf("reflection gives %d paths, without sites[].gateways[].publicKey: %v", len(refl), refl)
	}
}

// probeDoc is a config document with only the field at generic path p,
// its value null (the decoder checks the key and decodes nothing).
func probeDoc(p string) []byte {
	parts := strings.Split(p, ".")
	var v any
	for i := len(parts) - 1; i >= 0; i-- {
		name, list := strings.CutSuffix(parts[i], "[]")
		if list {
			v = []any{v}
		}
		v = map[string]any{name: v}
	}
	b, _ := yaml.Marshal(v)
	return b
}

// unknownTo reports whether config.Parse calls the field at p unknown.
func unknownTo(p string) bool {
	_, err := config.Parse("probe.yaml", probeDoc(p))
	return err != nil && strings.Contains(err.Error(), "unknown field")
}

// TestFieldPathsDecoder: the config decoder is written by hand, field by
// field, beside the struct's tags; the tags are what the generator reads.
// Every tagged path must be a field the decoder knows, and at every
// mapping the decoder must know no other name used anywhere in the
// config (an untagged field would be one the list leaves out, and check
// would warn about a field the previous release knows).
func TestFieldPathsDecoder(t *testing.T) {
	paths := fieldPaths(reflect.TypeFor[config.Config]())
	if !unknownTo("sites[].gateways[].bogusField") {
		t.Fatal("the probe does not see an unknown field")
	}
	names := map[string]bool{}
	mappings := map[string]bool{"": true}
	for _, p := range paths {
		if unknownTo(p) {
			t.Errorf("%s: a yaml tag, but the decoder calls it an unknown field", p)
		}
		i := strings.LastIndex(p, ".")
		names[p[i+1:]] = true
		if i >= 0 {
			mappings[p[:i]] = true
		}
	}
	known := map[string]bool{}
	for _, p := range paths {
		known[p] = true
	}
	for m := range mappings {
		for n := range names {
			if p := joinField(m, n); !known[p] && !unknownTo(p) {
				t.Errorf("%s: the decoder knows it, but no yaml tag says so", p)
			}
		}
	}
}

// compatFixture is a config of the previous release's fields and, at
// known lines, fields added since: a preshared key (line 4) at the top,
// a site's allowed sources (line 8) and a gateway's previous public key
// and its expiry (lines 12 and 13), in mappings v0.1.0 knows.
const compatFixture = `site: site-a
gateway: gw-a1
privateKeyFile: a.key
presharedKeys: [{site: site-b, file: b.psk}]
sites:
  - name: site-a
    nodeCIDRs: [10.224.0.0/16]
    allowedSources: [site-b]
    podCIDRs: [10.244.0.0/16]
    gateways:
      - name: gw-a1
        previousPublicKey: %[3]s
        previousKeyExpires: 2099-01-01T00:00:00Z
        address: 10.224.0.4
        endpoint: 198.51.100.1:51820
        publicKey: %[1]s
  - name: site-b
    nodeCIDRs: [192.168.50.0/24]
    podCIDRs: [10.245.0.0/16]
    gateways:
      - {name: gw-b1, address: 192.168.50.2, endpoint: 203.0.113.7:51820, publicKey: %[2]s}
`

// compatConfig writes compatFixture's config, with only the previous
// release's fields when old, and returns its path.
func compatConfig(t *testing.T, old bool) string {
	t.Helper()
	_, privA, _ := runCLI(t, "", "genkey")
	_, pubA, _ := runCLI(t, privA, "pubkey")
	_, privB, _ := runCLI(t, "", "genkey")
	_, pubB, _ := runCLI(t, privB, "pubkey")
	_, privOld, _ := runCLI(t, "", "genkey")
	_, pubOld, _ := runCLI(t, privOld, "pubkey")
	text := fmt.Sprintf(compatFixture, strings.TrimSpace(pubA), strings.TrimSpace(pubB), strings.TrimSpace(pubOld))
	if old {
		var keep []string
		for _, line := range strings.Split(text, "\n") {
			if !strings.Contains(line, "presharedKeys") && !strings.Contains(line, "allowedSources") && !strings.Contains(line, "previousPublicKey") && !strings.Contains(line, "previousKeyExpires") {
				keep = append(keep, line)
			}
		}
		text = strings.Join(keep, "\n")
	}
	path := filepath.Join(t.TempDir(), "bridgehead.yaml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// compatFixtureWarnings are the warnings compatFixture gets, by line.
var compatFixtureWarnings = []string{":4: presharedKeys: ", ":8: sites[0].allowedSources: ", ":12: sites[0].gateways[0].previousPublicKey: ",
	":13: sites[0].gateways[0].previousKeyExpires: "}

func TestCompatWarnings(t *testing.T) {
	if previousReleaseFields.version != "v0.1.0" {
		t.Skipf("the fixture's fields are the ones added after v0.1.0; the previous release is %s", previousReleaseFields.version)
	}
	path := compatConfig(t, false)
	ws := compatWarnings(path, nil)
	var got []string
	for _, w := range ws {
		got = append(got, w.Error())
	}
	if len(got) != len(compatFixtureWarnings) {
		t.Fatalf("got %d warnings, want %d:\n%s", len(got), len(compatFixtureWarnings), strings.Join(got, "\n"))
	}
	for i, w := range got {
		if !strings.HasPrefix(w, path+compatFixtureWarnings[i]) || !strings.Contains(w, "introduced after v0.1.0") {
			t.Errorf("warning %d: %s; want %s…introduced after v0.1.0…", i, w, path+compatFixtureWarnings[i])
		}
	}
	if ws := compatWarnings(compatConfig(t, true), nil); len(ws) != 0 {
		t.Errorf("a config of v0.1.0's fields: %v", ws)
	}
	// A field neither release knows is check's problem, not a warning.
	bogus := filepath.Join(t.TempDir(), "b.yaml")
	os.WriteFile(bogus, []byte("site: a\nbogusField: 1\nsites:\n  - name: a\n    lanez: 2\n"), 0o600)
	if ws := compatWarnings(bogus, nil); len(ws) != 0 {
		t.Errorf("fields no release knows: %v", ws)
	}
}

// TestCheckWarnsPreviousRelease: `bridgehead check` prints the warnings
// and still passes the config.
func TestCheckWarnsPreviousRelease(t *testing.T) {
	if previousReleaseFields.version != "v0.1.0" {
		t.Skipf("the fixture's fields are the ones added after v0.1.0; the previous release is %s", previousReleaseFields.version)
	}
	path := compatConfig(t, false)
	code, stdout, stderr := runCLI(t, "", "check", "--skip-private-key", "--config", path)
	if code != 0 || !strings.Contains(stdout, ": ok: ") {
		t.Fatalf("check: exit %d\n%s%s", code, stdout, stderr)
	}
	for _, w := range compatFixtureWarnings {
		if !strings.Contains(stderr, "warning: "+path+w) {
			t.Errorf("check's output lacks the warning %q:\n%s", path+w, stderr)
		}
	}
	old := compatConfig(t, true)
	if code, stdout, stderr := runCLI(t, "", "check", "--skip-private-key", "--config", old); code != 0 || strings.Contains(stderr, "introduced after") {
		t.Errorf("check of a v0.1.0 config: exit %d\n%s%s", code, stdout, stderr)
	}
}

// TestPreviousReleaseRefuses: the previous release's own binary, as
// e2e's compatibility tests build it (its release cache), refuses the
// fixture at exactly the fields check warns about, and takes the config
// without them.
func TestPreviousReleaseRefuses(t *testing.T) {
	if previousReleaseFields.version != "v0.1.0" {
		t.Skipf("the fixture's fields are the ones added after v0.1.0; the previous release is %s", previousReleaseFields.version)
	}
	parent := os.Getenv("BRIDGEHEAD_RELEASES")
	if parent == "" {
		home, _ := os.UserHomeDir()
		parent = filepath.Join(home, ".cache", "bridgehead", "releases")
	}
	bin := filepath.Join(parent, previousReleaseFields.commit, "bridgehead")
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no build of %s at %s: e2e's TestCompatPreviousRelease builds it", previousReleaseFields.version, bin)
	}
	path := compatConfig(t, false)
	out, err := exec.Command(bin, "check", "--skip-private-key", "--config", path).CombinedOutput()
	if err == nil {
		t.Fatalf("%s took the config with fields added since:\n%s", previousReleaseFields.version, out)
	}
	var refused []string
	for _, line := range strings.Split(string(out), "\n") {
		if strings.Contains(line, "unknown field") {
			refused = append(refused, line)
		}
	}
	if len(refused) != len(compatFixtureWarnings) {
		t.Fatalf("%s refused %d fields, check warns about %d:\n%s", previousReleaseFields.version, len(refused), len(compatFixtureWarnings), out)
	}
	for i, line := range refused {
		if !strings.HasPrefix(line, path+compatFixtureWarnings[i]+"unknown field") {
			t.Errorf("%s: %s; want %sunknown field", previousReleaseFields.version, line, path+compatFixtureWarnings[i])
		}
	}
	if out, err := exec.Command(bin, "check", "--skip-private-key", "--config", compatConfig(t, true)).CombinedOutput(); err != nil {
		t.Errorf("%s refused the config without them: %v\n%s", previousReleaseFields.version, err, out)
	}
	t.Logf("%s refused:\n%s", previousReleaseFields.version, strings.Join(refused, "\n"))
}
