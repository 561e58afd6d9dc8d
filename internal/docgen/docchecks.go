package docgen

import (
	"fmt"
	"go/ast"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// Paragraph is one paragraph of a hand-written doc, outside code blocks.
type Paragraph struct {
	// File and Line locate its first line.
	File string
	Line int
	Text string
}

// DocFiles lists the hand-written docs: README.md and docs/**/*.md but
// the generated docs/reference.
func DocFiles(root string) ([]string, error) {
	out := []string{"README.md"}
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		if d.IsDir() && rel == "docs/reference" {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".md") {
			out = append(out, rel)
		}
		return nil
	})
	return out, err
}

// Paragraphs splits a Markdown file into paragraphs at blank lines,
// leaving out fenced and indented code blocks.
func Paragraphs(file string, data []byte) []Paragraph {
	var out []Paragraph
	var cur []string
	start, fenced := 0, false
	flush := func() {
		if len(cur) > 0 {
			out = append(out, Paragraph{File: file, Line: start, Text: strings.Join(cur, "\n")})
		}
		cur = nil
	}
	for i, line := range strings.Split(string(data), "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "```"):
			fenced = !fenced
			flush()
		case fenced:
		case trimmed == "":
			flush()
		case strings.HasPrefix(line, "    ") && len(cur) == 0:
			// an indented code block
		default:
			if len(cur) == 0 {
				start = i + 1
			}
			cur = append(cur, line)
		}
	}
	flush()
	return out
}

// ReadParagraphs reads the paragraphs of the files, named from root.
func ReadParagraphs(root string, files []string) ([]Paragraph, error) {
	var out []Paragraph
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			return nil, err
		}
		out = append(out, Paragraphs(f, data)...)
	}
	return out, nil
}

// StateNames are the names the code gives gateway, peer, link and site
// states, paths and down reasons: the string constants named State* in
// health, the constants of types State and Path in mesh, and what the
// String methods of LiveState and DownReason return (found anywhere
// under router).
func StateNames(root string) (map[string]bool, error) {
	names := map[string]bool{}
	for _, dir := range []string{"health", "mesh"} {
		files, err := parseDir(root, dir)
		if err != nil {
			return nil, err
		}
		for _, f := range files {
			for _, decl := range f.File.Decls {
				gd, ok := decl.(*ast.GenDecl)
				if !ok || gd.Tok != token.CONST {
					continue
				}
				for _, spec := range gd.Specs {
					vs := spec.(*ast.ValueSpec)
					typ := exprName(vs.Type)
					for i, n := range vs.Names {
						if i >= len(vs.Values) || !(strings.HasPrefix(n.Name, "State") || typ == "State" || typ == "Path") {
							continue
						}
						if s, ok := evalString(vs.Values[i], nil); ok && s != "" {
							names[s] = true
						}
					}
				}
			}
		}
	}
	files, err := parseDir(root, "router")
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		for _, decl := range f.File.Decls {
			fd, ok := decl.(*ast.FuncDecl)
			if !ok || fd.Name.Name != "String" || fd.Recv == nil || fd.Body == nil {
				continue
			}
			if recv := exprName(fd.Recv.List[0].Type); recv != "LiveState" && recv != "DownReason" {
				continue
			}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if ret, ok := n.(*ast.ReturnStmt); ok {
					for _, r := range ret.Results {
						if s, ok := evalString(r, nil); ok && s != "" {
							names[s] = true
						}
					}
				}
				return true
			})
		}
	}
	if !names["up"] || !names["down"] || !names["no answer"] {
		return nil, fmt.Errorf("the state names found in the code (%v) lack up, down or no answer: the scanner lost track", names)
	}
	return names, nil
}

var (
	// stateList: "state (`up`, `down (no answer)`, ...)".
	stateList = regexp.MustCompile("(?i)\\bstates?\\s*\\(((?:[^()]|\\([^()]*\\))*)\\)")
	// gatewayIs: "a gateway is **up** or **draining**", to the sentence's end.
	gatewayIs  = regexp.MustCompile(`(?i)\bgateways? (?:is|are) \*\*[a-z]+\*\*[^.]*`)
	boldWord   = regexp.MustCompile(`\*\*([a-z]+)\*\*`)
	codeOrBold = regexp.MustCompile("`([^`]+)`|\\*\\*([^*]+)\\*\\*")
	codeSpan   = regexp.MustCompile("`([^`]+)`")
	stateToken = regexp.MustCompile(`^([a-z]+(?: [a-z]+)?)(?: \(([^)]*)\))?$`)
)

// CheckStates reports state names the docs use that the code does not
// have: the backticked names in parentheses after "state" ("its state
// (`up`, `never`, `down (no answer)`)"; after down, the parenthesis must
// be a down reason) and the bold words of a sentence that says what a
// gateway is ("a gateway is **up** when ..., **never** otherwise").
func CheckStates(paras []Paragraph, known map[string]bool) []string {
	var problems []string
	bad := func(p Paragraph, what, name string) {
		problems = append(problems, fmt.Sprintf("%s:%d: %q is not a %s the code names (%s)", p.File, p.Line, name, what, sortedKeys(known)))
	}
	for _, p := range paras {
		text := strings.Join(strings.Fields(p.Text), " ")
		for _, m := range stateList.FindAllStringSubmatch(text, -1) {
			for _, c := range codeSpan.FindAllStringSubmatch(m[1], -1) {
				t := stateToken.FindStringSubmatch(c[1])
				if t == nil {
					continue
				}
				if !known[t[1]] {
					bad(p, "state", t[1])
				}
				if t[1] == "down" && t[2] != "" && !known[t[2]] {
					bad(p, "down reason", t[2])
				}
			}
		}
		for _, m := range gatewayIs.FindAllString(text, -1) {
			for _, w := range boldWord.FindAllStringSubmatch(m, -1) {
				if !known[w[1]] {
					bad(p, "state", w[1])
				}
			}
		}
	}
	return problems
}

func sortedKeys(m map[string]bool) string {
	var k []string
	for s := range m {
		k = append(k, s)
	}
	sort.Strings(k)
	return strings.Join(k, ", ")
}

var (
	metricMention = regexp.MustCompile(`\bbridgehead_[a-z][a-z0-9_]*(\*|\{[^}]*\})?`)
	labelName     = regexp.MustCompile(`([a-z_]+)\s*(=~|!=|!~|=)`)
	helpLine      = regexp.MustCompile(`(?m)^\s*# HELP (bridgehead_[a-z0-9_]+) (.*)$`)
)

// CheckMetricMentions reports, in one doc's text, metric names the code
// does not declare, label names a metric does not have, and "# HELP"
// lines whose text is not the metric's help.
func CheckMetricMentions(file, text string, ms []Metric) []string {
	byName := map[string]Metric{}
	for _, m := range ms {
		byName[m.Name] = m
	}
	series := func(name string) (Metric, bool) {
		if m, ok := byName[name]; ok {
			return m, true
		}
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			if m, ok := byName[strings.TrimSuffix(name, suf)]; ok && strings.HasSuffix(name, suf) && (m.Type == "histogram" || m.Type == "summary") {
				return m, true
			}
		}
		return Metric{}, false
	}
	var problems []string
	lineOf := func(off int) int { return strings.Count(text[:off], "\n") + 1 }
	for _, loc := range metricMention.FindAllStringSubmatchIndex(text, -1) {
		mention := text[loc[0]:loc[1]]
		if prefix, ok := strings.CutSuffix(mention, "*"); ok {
			if !knownMetric(ms, strings.TrimSuffix(prefix, "_")) && !hasPrefixMetric(ms, prefix) {
				problems = append(problems, fmt.Sprintf("%s:%d: no metric the code declares starts with %s", file, lineOf(loc[0]), prefix))
			}
			continue
		}
		name, sel, _ := strings.Cut(mention, "{")
		name = strings.TrimRight(name, "_")
		m, ok := series(name)
		if !ok {
			problems = append(problems, fmt.Sprintf("%s:%d: %s is not a metric the code declares", file, lineOf(loc[0]), name))
			continue
		}
		for _, l := range labelName.FindAllStringSubmatch(sel, -1) {
			if l[1] != "le" && l[1] != "quantile" && !contains(m.Labels, l[1]) {
				problems = append(problems, fmt.Sprintf("%s:%d: %s has no label %q (labels: %s)", file, lineOf(loc[0]), name, l[1], strings.Join(m.Labels, ", ")))
			}
		}
	}
	for _, loc := range helpLine.FindAllStringSubmatchIndex(text, -1) {
		name, help := text[loc[2]:loc[3]], text[loc[4]:loc[5]]
		if m, ok := byName[name]; ok && m.Help != help {
			problems = append(problems, fmt.Sprintf("%s:%d: the help of %s is %q, not %q", file, lineOf(loc[0]), name, m.Help, help))
		}
	}
	return problems
}

// restartMention: a paragraph (or the one before it) that speaks of a
// restart.
var restartMention = regexp.MustCompile(`(?i)\brestart`)

// CheckRestartLists finds the docs' lists of restart-only fields — a
// paragraph naming at least five config fields in backticks, in or
// right after a paragraph speaking of a restart — and reports each list
// that is not the code's set. It returns how many lists it found.
func CheckRestartLists(paras []Paragraph, fields []ConfigField, restart []string) (int, []string) {
	isField := map[string]bool{}
	for _, f := range fields {
		isField[f.Path] = true
	}
	want := append([]string(nil), restart...)
	sort.Strings(want)
	found := 0
	var problems []string
	for i, p := range paras {
		if !restartMention.MatchString(p.Text) && (i == 0 || paras[i-1].File != p.File || !restartMention.MatchString(paras[i-1].Text)) {
			continue
		}
		seen := map[string]bool{}
		for _, m := range codeOrBold.FindAllStringSubmatch(p.Text, -1) {
			if isField[m[1]] {
				seen[m[1]] = true
			}
		}
		if len(seen) < 5 {
			continue
		}
		found++
		var got []string
		for f := range seen {
			got = append(got, f)
		}
		sort.Strings(got)
		if strings.Join(got, ",") != strings.Join(want, ",") {
			problems = append(problems, fmt.Sprintf("%s:%d: the restart-only fields listed are %v; the reload refuses changes to %v", p.File, p.Line, got, want))
		}
	}
	return found, problems
}

// hasPrefixMetric: some metric's name starts with prefix.
func hasPrefixMetric(ms []Metric, prefix string) bool {
	for _, m := range ms {
		if strings.HasPrefix(m.Name, prefix) {
			return true
		}
	}
	return false
}
