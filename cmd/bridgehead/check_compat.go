package main

import (
	"bufio"
	_ "embed"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
)

// Fields the previous release refuses. A gateway decodes its config
// strictly: a field it does not know is an error, and it keeps its old
// config (a reload) or does not start. During a rolling upgrade the
// previous release's gateways still run, so a config that uses a field
// added since is refused by them. `check` warns about each such field
// it finds, with its file, line and path.
//
// The previous release's field set is generated, not written by hand:
// TestPreviousReleaseFields derives it from that release's config
// package (its commit, named in CHANGELOG.md) and fails when the stored
// list is not what that source gives (go test ./cmd/bridgehead -run
// TestPreviousReleaseFields -args -update-compat-fields rewrites it).

//go:embed testdata/previous-release-fields.txt
var previousReleaseFieldsFile string

// releaseFields is the set of YAML field paths one release knows.
type releaseFields struct {
	version, commit string
	// paths are field paths with list elements as "[]":
	// "sites[].gateways[].publicKey"; a mapping's own path is one too
	// ("interface" beside "interface.name").
	paths map[string]bool
}

// parseReleaseFields reads the stored list: a "release VERSION COMMIT"
// line, then one path a line; "#" lines are comments.
func parseReleaseFields(text string) (releaseFields, error) {
	rf := releaseFields{paths: map[string]bool{}}
	sc := bufio.NewScanner(strings.NewReader(text))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "release "):
			f := strings.Fields(line)
			if len(f) != 3 || rf.version != "" {
				return releaseFields{}, fmt.Errorf("line %d: want one \"release VERSION COMMIT\" line, got %q", n, line)
			}
			rf.version, rf.commit = f[1], f[2]
		default:
			rf.paths[line] = true
		}
	}
	if rf.version == "" || len(rf.paths) == 0 {
		return releaseFields{}, fmt.Errorf("no release line or no field paths")
	}
	return rf, sc.Err()
}

// previousReleaseFields is the stored list; it is checked by the tests,
// so a broken one is a build defect.
var previousReleaseFields = func() releaseFields {
	rf, err := parseReleaseFields(previousReleaseFieldsFile)
	if err != nil {
		panic("testdata/previous-release-fields.txt: " + err.Error())
	}
	return rf
}()

// compatWarnings names each field of the config file at path (and of the
// catalog file it follows, if any) that the previous release does not
// know. cfg may be nil (the file did not decode): the file is still
// read as YAML, and a file that is not YAML gives no warning (check
// reports it as a problem).
func compatWarnings(path string, cfg *config.Config) config.ErrorList {
	rel, current := previousReleaseFields, currentFields()
	files := []string{path}
	if cfg != nil && cfg.Follows() {
		files = append(files, cfg.CatalogPath())
	}
	var out config.ErrorList
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			continue
		}
		var doc yaml.Node
		if yaml.Unmarshal(data, &doc) != nil || len(doc.Content) == 0 {
			continue
		}
		for _, u := range unknownFields(doc.Content[0], rel.paths) {
			if !current[u.generic] {
				continue // unknown to this release too: check reports it
			}
			out = append(out, &config.Error{File: file, Line: u.line, Field: u.path,
				Msg: fmt.Sprintf("field introduced after %s (this build: %s): a gateway of %s refuses the whole config (unknown field), so set it only once no gateway runs %s",
					rel.version, buildVersion(), rel.version, rel.version)})
		}
	}
	return out
}

// unknownField is a key of a config file outside a release's paths.
type unknownField struct {
	path    string // with indexes: "sites[1].gateways[0].previousPublicKey"
	generic string // with "[]": "sites[].gateways[].previousPublicKey"
	line    int
}

// unknownFields walks a YAML tree and returns its keys that known lacks,
// the outermost only: a release refuses a mapping it does not know
// without looking inside it.
func unknownFields(root *yaml.Node, known map[string]bool) []unknownField {
	var out []unknownField
	var walk func(n *yaml.Node, path, generic string, depth int)
	walk = func(n *yaml.Node, path, generic string, depth int) {
		for n != nil && n.Kind == yaml.AliasNode && depth < 16 {
			n, depth = n.Alias, depth+1
		}
		if n == nil || depth >= 16 {
			return
		}
		switch n.Kind {
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				k := n.Content[i]
				if k.Kind != yaml.ScalarNode {
					continue // check reports it
				}
				p, g := joinField(path, k.Value), joinField(generic, k.Value)
				if !known[g] {
					out = append(out, unknownField{path: p, generic: g, line: k.Line})
					continue
				}
				walk(n.Content[i+1], p, g, depth)
			}
		case yaml.SequenceNode:
			for i, e := range n.Content {
				walk(e, fmt.Sprintf("%s[%d]", path, i), generic+"[]", depth)
			}
		}
	}
	walk(root, "", "", 0)
	return out
}

// currentFields is the set of field paths this build's config knows.
var currentFields = sync.OnceValue(func() map[string]bool {
	m := map[string]bool{}
	for _, p := range fieldPaths(reflect.TypeFor[config.Config]()) {
		m[p] = true
	}
	return m
})

func joinField(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// fieldPaths lists the YAML field paths of a config struct type by its
// yaml tags: a struct with tagged fields is a mapping, a slice of one a
// list of mappings ("[]"), anything else a value. Fields without a yaml
// tag, or tagged "-", are not in the file.
func fieldPaths(t reflect.Type) []string {
	var out []string
	var walk func(t reflect.Type, prefix string, seen map[reflect.Type]bool)
	walk = func(t reflect.Type, prefix string, seen map[reflect.Type]bool) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			if e := t.Elem(); hasYAMLFields(e) {
				walk(e, prefix+"[]", seen)
			}
			return
		}
		if !hasYAMLFields(t) || seen[t] {
			return
		}
		seen[t] = true
		defer delete(seen, t)
		for i := 0; i < t.NumField(); i++ {
			name := yamlName(t.Field(i).Tag.Get("yaml"))
			if name == "" {
				continue
			}
			p := joinField(prefix, name)
			out = append(out, p)
			walk(t.Field(i).Type, p, seen)
		}
	}
	walk(t, "", map[reflect.Type]bool{})
	sort.Strings(out)
	return out
}

// hasYAMLFields reports whether t (through pointers) is a struct with a
// yaml-tagged field: a mapping of the config file.
func hasYAMLFields(t reflect.Type) bool {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return false
	}
	for i := 0; i < t.NumField(); i++ {
		if yamlName(t.Field(i).Tag.Get("yaml")) != "" {
			return true
		}
	}
	return false
}

// yamlName is the key of a yaml tag ("" for none and "-").
func yamlName(tag string) string {
	name, _, _ := strings.Cut(tag, ",")
	if name == "-" {
		return ""
	}
	return name
}
