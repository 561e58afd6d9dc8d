package docgen

import (
	"bytes"
	"fmt"
	"go/ast"
	"net/netip"
	"reflect"
	"sort"
	"strings"
	"time"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/control"
)

// ConfigField is one field of the config file.
type ConfigField struct {
	// Path is the YAML path, lists as "[]": "sites[].gateways[].name".
	Path string
	// Name is the YAML name, the last element of Path.
	Name string
	// Type is how the value is written ("duration", "list of CIDRs").
	Type string
	// Doc is the Go field's doc comment, as one paragraph.
	Doc string
	// Default and Values come from config.FieldRules.
	Default, Values string
	// Section: the field holds other fields.
	Section bool
	// Depth is how many sections enclose it.
	Depth int
	// goType is the field's Go type, for the example's completeness.
	goType reflect.Type
}

// ConfigFields lists the fields of config.Config in file order, with the
// doc comments of the Go fields under root/config.
func ConfigFields(root string) ([]ConfigField, error) {
	files, err := parseDir(root, "config")
	if err != nil {
		return nil, err
	}
	docs := fieldDocs(files)
	rules := map[string]config.FieldRule{}
	for _, r := range append(config.FieldRules(), extraRules()...) {
		rules[r.Path] = r
	}
	var out []ConfigField
	walkConfig(reflect.TypeFor[config.Config](), "", 0, docs, &out)
	var missing []string
	known := map[string]bool{}
	for i := range out {
		f := &out[i]
		known[f.Path] = true
		r := rules[f.Path]
		f.Default, f.Values = r.Default, r.Values
		if f.Doc == "" {
			missing = append(missing, f.Path)
		}
	}
	for p := range rules {
		if !known[p] {
			missing = append(missing, p+" (a FieldRule for no field)")
		}
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		return out, fmt.Errorf("config fields without a doc comment: %s", strings.Join(missing, ", "))
	}
	return out, nil
}

// extraRules are the defaults of config fields that live outside package
// config (it does not import their packages).
func extraRules() []config.FieldRule {
	return []config.FieldRule{
		{Path: "controlSocket", Default: control.DefaultSocket},
	}
}

// walkConfig appends the YAML fields of struct type t under prefix.
func walkConfig(t reflect.Type, prefix string, depth int, docs map[string]string, out *[]ConfigField) {
	for i := 0; i < t.NumField(); i++ {
		sf := t.Field(i)
		name, _, _ := strings.Cut(sf.Tag.Get("yaml"), ",")
		if name == "" || name == "-" || !sf.IsExported() {
			continue
		}
		path := name
		if prefix != "" {
			path = prefix + "." + name
		}
		ft := sf.Type
		f := ConfigField{Path: path, Name: name, Type: typeName(ft), Doc: docs[t.Name()+"."+sf.Name], Depth: depth, goType: ft}
		elem, list := sectionOf(ft)
		f.Section = elem != nil
		*out = append(*out, f)
		if elem != nil {
			if list {
				path += "[]"
			}
			walkConfig(elem, path, depth+1, docs, out)
		}
	}
}

// sectionOf returns the struct a field holds (through a pointer or a
// list), or nil for a single value.
func sectionOf(t reflect.Type) (elem reflect.Type, list bool) {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() == reflect.Slice {
		t, list = t.Elem(), true
	}
	if t.Kind() == reflect.Struct && !isValue(t) {
		return t, list
	}
	return nil, false
}

// isValue: a struct type written as one value.
func isValue(t reflect.Type) bool { return valueName(t) != "" }

// valueName is how a struct written as one value is written; "" for
// other types.
func valueName(t reflect.Type) string {
	switch t {
	case reflect.TypeFor[time.Duration]():
		return "duration"
	case reflect.TypeFor[time.Time]():
		return "time (RFC 3339)"
	case reflect.TypeFor[netip.Addr]():
		return "IP address"
	case reflect.TypeFor[netip.Prefix]():
		return "CIDR"
	case reflect.TypeFor[config.MTU]():
		return `integer or "auto"`
	}
	return ""
}

// typeName is how a value of type t is written in the file.
func typeName(t reflect.Type) string {
	if v := valueName(t); v != "" {
		return v
	}
	switch t.Kind() {
	case reflect.Pointer:
		return typeName(t.Elem())
	case reflect.Slice:
		return "list of " + plural(typeName(t.Elem()))
	case reflect.Struct:
		return "section"
	case reflect.Bool:
		return "boolean"
	case reflect.Int:
		return "integer"
	case reflect.String:
		return "string"
	}
	return t.String()
}

// plural names a list's elements.
func plural(s string) string {
	switch {
	case s == "section":
		return "sections"
	case strings.HasPrefix(s, "IP address"):
		return "IP addresses"
	case s == "CIDR", s == "string", s == "integer":
		return s + "s"
	}
	return s
}

// fieldDocs maps "Type.Field" to the field's doc comment, as one line.
func fieldDocs(files []sourceFile) map[string]string {
	docs := map[string]string{}
	for _, f := range files {
		ast.Inspect(f.File, func(n ast.Node) bool {
			ts, ok := n.(*ast.TypeSpec)
			if !ok {
				return true
			}
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				return true
			}
			for _, fl := range st.Fields.List {
				doc := fl.Doc
				if doc == nil {
					doc = fl.Comment
				}
				if doc == nil {
					continue
				}
				text := strings.Join(strings.Fields(doc.Text()), " ")
				for _, name := range fl.Names {
					docs[ts.Name.Name+"."+name.Name] = text
				}
			}
			return false
		})
	}
	return docs
}

// ConfigReference renders docs/reference/config.md: a table of every
// field, then a section per field with an anchor per YAML name (the
// shallowest field of that name) and one per path, and the fields a
// reload refuses to change.
func ConfigReference(fields []ConfigField, restartOnly []string) []byte {
	var b bytes.Buffer
	b.WriteString(generatedBy("config/*.go (doc comments, config.FieldRules) and the reload's restart-only fields"))
	b.WriteString("# Configuration file reference\n\n")
	b.WriteString("The gateway reads one YAML file (`bridgehead run --config FILE`; `bridgehead check --config FILE` validates it). ")
	b.WriteString("[bridgehead.yaml](bridgehead.yaml) is a complete example with every field. ")
	b.WriteString("Durations are Go durations (`200ms`, `25s`, `24h`). A field left out takes its default.\n\n")
	b.WriteString("| Field | Type | Default | Values |\n|---|---|---|---|\n")
	for _, f := range fields {
		fmt.Fprintf(&b, "| [`%s`](#%s) | %s | %s | %s |\n", f.Path, pathAnchor(f.Path), f.Type, cell(defaultText(f.Default)), cell(f.Values))
	}
	short := shortAnchors(fields)
	restart := map[string]bool{}
	for _, p := range restartOnly {
		restart[p] = true
	}
	for _, f := range fields {
		b.WriteString("\n")
		if short[f.Path] != "" {
			fmt.Fprintf(&b, "<a id=\"%s\"></a>\n", short[f.Path])
		}
		fmt.Fprintf(&b, "### `%s`\n\n", f.Path)
		fmt.Fprintf(&b, "%s\n\n", f.Doc)
		fmt.Fprintf(&b, "- Type: %s\n", f.Type)
		if f.Default != "" {
			fmt.Fprintf(&b, "- Default: %s\n", defaultText(f.Default))
		}
		if f.Values != "" {
			fmt.Fprintf(&b, "- Values: %s\n", f.Values)
		}
		if restart[f.Path] {
			b.WriteString("- A reload refuses to change it: restart the gateway.\n")
		}
	}
	b.WriteString("\n## Restart-only fields\n\n")
	b.WriteString("A reload (SIGHUP, or the file changing) applies every other field; it refuses a change to these, and names them, until the gateway restarts:\n\n")
	for _, p := range restartOnly {
		fmt.Fprintf(&b, "- [`%s`](#%s)\n", p, pathAnchor(p))
	}
	return b.Bytes()
}

// pathAnchor is the anchor of a field's heading, as GitHub makes it from
// the heading's text: lower case, punctuation but '-' and '_' dropped.
func pathAnchor(path string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(path) {
		if r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_' {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// shortAnchors gives each YAML name, lower case, to the shallowest field
// of that name (the first in file order among equals), unless it is
// already that field's path anchor.
func shortAnchors(fields []ConfigField) map[string]string {
	taken := map[string]bool{}
	for _, f := range fields {
		taken[pathAnchor(f.Path)] = true
	}
	byName := map[string]ConfigField{}
	for _, f := range fields {
		n := strings.ToLower(f.Name)
		if cur, ok := byName[n]; !ok || f.Depth < cur.Depth {
			byName[n] = f
		}
	}
	out := map[string]string{}
	for n, f := range byName {
		if !taken[n] {
			out[f.Path] = n
		}
	}
	return out
}

// defaultText shows a default value as code, and a description of one
// ("one per CPU, at most 64") as words.
func defaultText(d string) string {
	if strings.Contains(d, " ") {
		return d
	}
	return code(d)
}
