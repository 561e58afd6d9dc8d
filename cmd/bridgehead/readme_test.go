package main

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/internal/mdblock"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// The product docs' examples are tested so that they cannot rot. The
// product docs are README.md and every docs/**/*.md except docs/conformance/
// and docs/benchmarks-history.md (docFiles); deploy/README.md is checked
// with them where it has blocks.
//
//   - every ```yaml block, and the example config, is a config that passes
//     `bridgehead check` with no warning for every gateway of every site
//     (with generated keys), and `bridgehead routes` for every site in
//     every format. A block that is not a whole file is marked
//     <!-- fragment: reason --> and is checked merged over the last whole
//     config before it in the same file (its top-level keys replace the
//     example's); a YAML block that is no bridgehead config (cloud-init, a
//     manifest) is marked <!-- not-config: reason -->;
//   - every ```sh block is marked, on the line before it,
//     <!-- runs-in: TestName --> (that test runs it; it must exist) or
//     <!-- not-run: reason -->;
//   - every command the docs call, in a fenced or indented block, is one
//     of the CLI's and takes the flags it is given, and together the
//     docs' ```sh blocks call every command of the CLI;
//   - no product doc speaks of the project's history or tracker: the word
//     "seed", "the issue", or an issue number (#12).

const repo = "../.."

// docFiles returns the product docs, relative to the repository root:
// README.md and docs/**/*.md but docs/conformance/ and
// docs/benchmarks-history.md, in a stable order.
func docFiles(t *testing.T) []string {
	t.Helper()
	files := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(repo, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(repo, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if d.IsDir() {
			if rel == "docs/conformance" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(rel, ".md") && rel != "docs/benchmarks-history.md" {
			files = append(files, rel)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(files[1:])
	return files
}

// checkedFiles is docFiles and deploy/README.md.
func checkedFiles(t *testing.T) []string {
	return append(docFiles(t), "deploy/README.md")
}

func readBlocks(t *testing.T, file string) []mdblock.Block {
	t.Helper()
	blocks, err := mdblock.Read(filepath.Join(repo, file))
	if err != nil {
		t.Fatal(err)
	}
	return blocks
}

func TestReadmeConfigs(t *testing.T) {
	type cfg struct {
		name string
		text string
	}
	var configs []cfg
	total := 0
	for _, file := range checkedFiles(t) {
		var base string
		n := 0
		for _, b := range readBlocks(t, file) {
			if b.Lang != "yaml" {
				continue
			}
			if b.Marker == "not-config" {
				if len(strings.Fields(b.Arg)) < 2 {
					t.Errorf("%s: not-config needs a reason, got %q", b, b.Arg)
				}
				continue
			}
			text := b.Text
			if b.Marker == "fragment" {
				if base == "" {
					t.Errorf("%s: a config fragment needs a whole config before it", b)
					continue
				}
				text = mergeTop(t, b.String(), base, b.Text)
			} else {
				base = b.Text
			}
			configs = append(configs, cfg{b.String(), text})
			n++
		}
		total += n
	}
	if total == 0 {
		t.Fatal("the docs have no ```yaml config example")
	}
	example, err := os.ReadFile(filepath.Join(repo, "deploy/package/bridgehead.yaml.example"))
	if err != nil {
		t.Fatal(err)
	}
	configs = append(configs, cfg{"deploy/package/bridgehead.yaml.example", string(example)})
	for _, c := range configs {
		t.Run(c.name, func(t *testing.T) { checkEverySite(t, c.text) })
	}
}

// checkEverySite runs check for every gateway of every site as the local
// one, with generated keys, and routes for every site in every format.
func checkEverySite(t *testing.T, text string) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(text), &doc); err != nil {
		t.Fatalf("not YAML: %v", err)
	}
	root := doc.Content[0]
	sites := mapValue(root, "sites")
	if sites == nil || len(sites.Content) == 0 {
		t.Fatal("no sites: a README config must be a whole config, or be marked <!-- fragment: reason --> (merged into the example before it) or <!-- not-config: reason -->")
	}
	dir := t.TempDir()
	type gw struct{ site, name, keyFile string }
	var gws []gw
	var siteNames []string
	for _, s := range sites.Content {
		sn := mapValue(s, "name").Value
		siteNames = append(siteNames, sn)
		gateways := mapValue(s, "gateways")
		if gateways == nil {
			t.Fatalf("site %s has no gateways", sn)
		}
		for _, g := range gateways.Content {
			k, err := bhcrypto.GeneratePrivateKey(rand.Reader)
			if err != nil {
				t.Fatal(err)
			}
			name := mapValue(g, "name").Value
			keyFile := filepath.Join(dir, sn+"-"+name+".key")
			if err := os.WriteFile(keyFile, []byte(k.String()+"\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			setMap(g, "publicKey", k.PublicKey().String())
			gws = append(gws, gw{sn, name, keyFile})
		}
	}
	for _, g := range gws {
		setMap(root, "site", g.site)
		setMap(root, "gateway", g.name)
		setMap(root, "privateKeyFile", g.keyFile)
		out, err := yaml.Marshal(&doc)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, g.site+"-"+g.name+".yaml")
		if err := os.WriteFile(path, out, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, stdout, stderr := runCLI(t, "", "check", "--config", path); code != 0 || stderr != "" {
			t.Errorf("bridgehead check as %s/%s: exit %d\n%s%s\nconfig:\n%s", g.site, g.name, code, stdout, stderr, out)
		}
		for _, site := range siteNames {
			for _, format := range noderoutes.Formats() {
				if code, _, stderr := runCLI(t, "", "routes", "--config", path, "--site", site, "--format", format); code != 0 {
					t.Errorf("bridgehead routes --site %s --format %s (config of %s): exit %d\n%s", site, format, g.name, code, stderr)
				}
			}
		}
	}
}

// mergeTop returns base with the top-level keys of frag replacing its own.
func mergeTop(t *testing.T, name, base, frag string) string {
	var b, f yaml.Node
	if err := yaml.Unmarshal([]byte(base), &b); err != nil {
		t.Fatalf("%s: base: %v", name, err)
	}
	if err := yaml.Unmarshal([]byte(frag), &f); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if len(f.Content) == 0 || f.Content[0].Kind != yaml.MappingNode {
		t.Fatalf("%s: a config fragment must be a mapping", name)
	}
	fm, bm := f.Content[0], b.Content[0]
	for i := 0; i+1 < len(fm.Content); i += 2 {
		key, val := fm.Content[i].Value, fm.Content[i+1]
		replaced := false
		for j := 0; j+1 < len(bm.Content); j += 2 {
			if bm.Content[j].Value == key {
				bm.Content[j+1] = val
				replaced = true
			}
		}
		if !replaced {
			bm.Content = append(bm.Content, fm.Content[i], val)
		}
	}
	out, err := yaml.Marshal(&b)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func mapValue(m *yaml.Node, key string) *yaml.Node {
	if m == nil || m.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func setMap(m *yaml.Node, key, value string) {
	if v := mapValue(m, key); v != nil {
		v.Kind, v.Tag, v.Value, v.Style = yaml.ScalarNode, "!!str", value, 0
		return
	}
	m.Content = append(m.Content,
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: key},
		&yaml.Node{Kind: yaml.ScalarNode, Tag: "!!str", Value: value})
}

// shellLang is true for the info strings of shell blocks.
func shellLang(lang string) bool {
	switch lang {
	case "sh", "bash", "shell", "console":
		return true
	}
	return false
}

func TestReadmeShellBlocksMarked(t *testing.T) {
	tests := testFuncs(t)
	n := 0
	var blocks []mdblock.Block
	for _, file := range docFiles(t) {
		blocks = append(blocks, readBlocks(t, file)...)
	}
	for _, b := range blocks {
		if !shellLang(b.Lang) {
			continue
		}
		n++
		switch b.Marker {
		case "runs-in":
			if !tests[b.Arg] {
				t.Errorf("%s: marked runs-in %q, but no test of that name exists", b, b.Arg)
			}
		case "not-run":
			if len(strings.Fields(b.Arg)) < 3 {
				t.Errorf("%s: not-run needs a reason, got %q", b, b.Arg)
			}
		default:
			t.Errorf("%s: mark it <!-- runs-in: TestName --> (and run it there) or <!-- not-run: reason --> on the line before", b)
		}
	}
	if n == 0 {
		t.Fatal("the docs have no ```sh blocks")
	}
}

// testFuncs lists the names of the repository's test functions.
func testFuncs(t *testing.T) map[string]bool {
	re := regexp.MustCompile(`(?m)^func (Test\w+)\(t \*testing\.T\)`)
	names := map[string]bool{}
	err := filepath.WalkDir(repo, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && strings.HasPrefix(d.Name(), ".") && path != repo {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range re.FindAllSubmatch(src, -1) {
			names[string(m[1])] = true
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return names
}

// docCalls returns, per command the docs' shell blocks call, the flags
// they pass it.
func docCalls(t *testing.T) map[string]map[string]bool {
	var lines []string
	for _, file := range docFiles(t) {
		for _, b := range readBlocks(t, file) {
			if shellLang(b.Lang) {
				lines = append(lines, strings.Split(b.Text, "\n")...)
			}
		}
	}
	return bridgeheadCalls(lines)
}

// bridgeheadCalls collects the commands and flags of the lines that start
// with "bridgehead " (comments after # left out).
func bridgeheadCalls(lines []string) map[string]map[string]bool {
	calls := map[string]map[string]bool{}
	flagRE := regexp.MustCompile(`(?:^|[\s\[])(--?[a-z][a-z0-9-]*)`)
	for _, line := range lines {
		line, _, _ = strings.Cut(line, "#")
		fields := strings.Fields(line)
		if len(fields) < 2 || fields[0] != "bridgehead" {
			continue
		}
		cmd := fields[1]
		if calls[cmd] == nil {
			calls[cmd] = map[string]bool{}
		}
		for _, m := range flagRE.FindAllStringSubmatch(strings.Join(fields[2:], " "), -1) {
			calls[cmd][m[1]] = true
		}
	}
	return calls
}

// checkCalls reports calls of unknown commands or with unknown flags.
func checkCalls(t *testing.T, file string, calls map[string]map[string]bool) {
	t.Helper()
	for cmd, flags := range calls {
		c, ok := lookup(cmd)
		if !ok || c.name != cmd {
			t.Errorf("%s calls `bridgehead %s`, which is not a command (commands: %s)", file, cmd, strings.Join(commandNames(), ", "))
			continue
		}
		known := map[string]bool{}
		for _, f := range c.flagNames() {
			known[f] = true
		}
		for f := range flags {
			if !known[f] {
				t.Errorf("%s passes %s to `bridgehead %s`, which has only %s", file, f, cmd, strings.Join(c.flagNames(), " "))
			}
		}
	}
}

// TestDocsCommands checks every line of every checked file's code blocks
// that calls bridgehead, fenced (any language) and indented alike.
func TestDocsCommands(t *testing.T) {
	for _, file := range checkedFiles(t) {
		data, err := os.ReadFile(filepath.Join(repo, file))
		if err != nil {
			t.Fatal(err)
		}
		checkCalls(t, file, bridgeheadCalls(codeLines(string(data))))
	}
}

// codeLines returns the lines of Markdown text inside fenced blocks and
// indented (four spaces or a tab) outside them, trimmed.
func codeLines(text string) []string {
	var lines []string
	fence := ""
	for _, l := range strings.Split(text, "\n") {
		trimmed := strings.TrimSpace(l)
		switch {
		case fence != "" && trimmed == fence:
			fence = ""
		case fence != "":
			lines = append(lines, trimmed)
		case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
			fence = trimmed[:3]
		case strings.HasPrefix(l, "    ") || strings.HasPrefix(l, "\t"):
			lines = append(lines, trimmed)
		}
	}
	return lines
}

func TestReadmeCommandList(t *testing.T) {
	calls := docCalls(t)
	checkCalls(t, "the docs", calls)
	var listed []string
	for cmd := range calls {
		listed = append(listed, cmd)
	}
	sort.Strings(listed)
	for _, name := range commandNames() {
		if calls[name] == nil {
			t.Errorf("no product doc lists `bridgehead %s` in a ```sh block (they list %s)", name, strings.Join(listed, ", "))
		}
	}
}

// TestDocsWords keeps the project's history and tracker out of the
// product docs: they speak to an operator.
func TestDocsWords(t *testing.T) {
	banned := []struct {
		re  *regexp.Regexp
		why string
	}{
		{regexp.MustCompile(`(?i)\bseeds?\b`), "the word \"seed\""},
		{regexp.MustCompile(`(?i)\bthe issue\b`), "\"the issue\""},
		{regexp.MustCompile(`(^|[^\w&/#])#[0-9]+\b`), "an issue number"},
	}
	for _, file := range docFiles(t) {
		data, err := os.ReadFile(filepath.Join(repo, file))
		if err != nil {
			t.Fatal(err)
		}
		for i, line := range strings.Split(string(data), "\n") {
			for _, b := range banned {
				if m := b.re.FindString(line); m != "" {
					t.Errorf("%s:%d: %s (%q): a product doc speaks to an operator, not of the project's history", file, i+1, b.why, strings.TrimSpace(m))
				}
			}
		}
	}
}

func TestMergeTop(t *testing.T) {
	base := "site: a\nrelay: {x: 1}\nsites: []\n"
	got := mergeTop(t, "test", base, "relay:\n  y: 2\nmetrics: {listen: ':1'}\n")
	var m map[string]any
	if err := yaml.Unmarshal([]byte(got), &m); err != nil {
		t.Fatal(err)
	}
	relay, _ := m["relay"].(map[string]any)
	if m["site"] != "a" || relay["y"] != 2 || relay["x"] != nil || m["metrics"] == nil {
		t.Fatalf("merged:\n%s", got)
	}
}

// runCLI runs the CLI in this process.
func runCLI(t *testing.T, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, strings.NewReader(stdin), &out, &errb)
	return code, out.String(), errb.String()
}

// TestArchitectureSVG fails when docs/architecture.dot changed without
// `make diagram`: the SVG carries the sha256 of the source it was
// rendered from, so this needs no Graphviz.
func TestArchitectureSVG(t *testing.T) {
	dot, err := os.ReadFile(filepath.Join(repo, "docs/architecture.dot"))
	if err != nil {
		t.Fatal(err)
	}
	svg, err := os.ReadFile(filepath.Join(repo, "docs/architecture.svg"))
	if err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256(dot)
	want := hex.EncodeToString(sum[:])
	m := regexp.MustCompile(`<!-- source: docs/architecture\.dot sha256:([0-9a-f]{64}) -->`).FindSubmatch(svg)
	switch {
	case m == nil:
		t.Fatal("docs/architecture.svg names no source sha256: render it with `make diagram`")
	case string(m[1]) != want:
		t.Fatalf("docs/architecture.svg was rendered from another docs/architecture.dot (sha256 %s, the file's is %s): run `make diagram`", m[1], want)
	}
}

// TestDocsLinks fails on a relative link of a product doc (or
// deploy/README.md), outside code, to a file that does not exist.
func TestDocsLinks(t *testing.T) {
	linkRE := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	codeSpanRE := regexp.MustCompile("`[^`]*`")
	for _, file := range checkedFiles(t) {
		data, err := os.ReadFile(filepath.Join(repo, file))
		if err != nil {
			t.Fatal(err)
		}
		fence := ""
		for i, line := range strings.Split(string(data), "\n") {
			trimmed := strings.TrimSpace(line)
			switch {
			case fence != "":
				if trimmed == fence {
					fence = ""
				}
				continue
			case strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~"):
				fence = trimmed[:3]
				continue
			}
			line = codeSpanRE.ReplaceAllString(line, "")
			for _, m := range linkRE.FindAllStringSubmatch(line, -1) {
				target, _, _ := strings.Cut(m[1], "#")
				if target == "" || strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path := filepath.Join(repo, filepath.Dir(file), target)
				if _, err := os.Stat(path); err != nil {
					t.Errorf("%s:%d: link to %s, which does not exist", file, i+1, m[1])
				}
			}
		}
	}
}
