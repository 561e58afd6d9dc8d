package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"gopkg.in/yaml.v3"
	corev1 "k8s.io/api/core/v1"

	"github.com/bridgehead/bridgehead/config"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// Source records where each object of a decoded resource file came from,
// so problems found later name file and line.
type Source struct {
	File string
	// lines maps "Kind/name" and "Kind/name:field.path[i]" to lines.
	lines map[string]int
}

// Line is the line of field (a path like "spec.nodeCIDRs[1]") of object
// kind/name: the field's own line, else its nearest enclosing field's,
// else the object's first line; 0 when the object is unknown.
func (s *Source) Line(kind, name, field string) int {
	if s == nil {
		return 0
	}
	key := kind + "/" + name
	for f := field; f != ""; f = parentPath(f) {
		if l, ok := s.lines[key+":"+f]; ok {
			return l
		}
	}
	return s.lines[key]
}

func parentPath(p string) string {
	if i := strings.LastIndexAny(p, ".["); i > 0 {
		return p[:i]
	}
	return ""
}

// maxDocuments bounds the documents of one resource file.
const maxDocuments = 100000

// Decode reads Site, Gateway and Node objects from YAML documents (or
// JSON). Every problem is reported, each with file, line and field: a
// document that is not one of those kinds, an unknown field, a value of
// the wrong type, a missing or repeated name. Nothing is returned unless
// the whole file decodes.
func Decode(file string, data []byte) (*Resources, *Source, error) {
	src := &Source{File: file, lines: map[string]int{}}
	r := &Resources{}
	var errs config.ErrorList
	errorf := func(line int, field, format string, args ...any) {
		errs = append(errs, &config.Error{File: file, Line: line, Field: field, Msg: fmt.Sprintf(format, args...)})
	}
	add := func(root *yaml.Node) {
		apiVersion, kind, name := scalarField(root, "apiVersion"), scalarField(root, "kind"), ""
		if md := field(root, "metadata"); md != nil {
			name = scalarField(md, "name")
		}
		var obj any
		switch {
		case kind == "Site" && apiVersion == v1.SchemeGroupVersion.String():
			r.Sites = append(r.Sites, v1.Site{})
			obj = &r.Sites[len(r.Sites)-1]
		case kind == "Gateway" && apiVersion == v1.SchemeGroupVersion.String():
			r.Gateways = append(r.Gateways, v1.Gateway{})
			obj = &r.Gateways[len(r.Gateways)-1]
		case kind == "Node" && apiVersion == "v1":
			r.Nodes = append(r.Nodes, corev1.Node{})
			obj = &r.Nodes[len(r.Nodes)-1]
		default:
			errorf(root.Line, "kind", "%s %q is not a resource of the catalog (Site and Gateway of %s, or v1 Node)", apiVersion, kind, v1.SchemeGroupVersion)
			return
		}
		key := kind + "/" + name
		if name == "" {
			errorf(root.Line, "metadata.name", "%s without a name", kind)
			return
		}
		if first, dup := src.lines[key]; dup {
			errorf(root.Line, "metadata.name", "%s %s is listed twice (also line %d)", kind, name, first)
			return
		}
		src.lines[key] = root.Line
		recordLines(src.lines, key+":", "", root)
		if err := decodeStrict(root, obj); err != nil {
			field := fieldOf(err)
			errorf(src.Line(kind, name, field), kind+" "+name+": "+field, "%s", cleanJSONError(err))
		}
	}
	objects := 0
	dec := yaml.NewDecoder(bytes.NewReader(data))
	for i := 0; ; i++ {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			errorf(yamlErrorLine(err), "", "%s", strings.TrimPrefix(err.Error(), "yaml: "))
			break
		}
		if i >= maxDocuments {
			errorf(doc.Line, "", "more than %d documents", maxDocuments)
			break
		}
		if len(doc.Content) == 0 || doc.Content[0].Kind == yaml.ScalarNode && doc.Content[0].Tag == "!!null" {
			continue
		}
		root := doc.Content[0]
		if root.Kind != yaml.MappingNode {
			errorf(root.Line, "", "document %d is not an object", i+1)
			continue
		}
		// A List (what kubectl get -o yaml prints, v1 List or SiteList,
		// GatewayList, NodeList) holds its objects under items.
		if kind := scalarField(root, "kind"); strings.HasSuffix(kind, "List") {
			items := field(root, "items")
			if items == nil || items.Kind != yaml.SequenceNode {
				errorf(root.Line, "items", "%s without a list of items", kind)
				continue
			}
			if objects += len(items.Content); objects > maxDocuments {
				errorf(root.Line, "items", "more than %d objects", maxDocuments)
				break
			}
			for j, item := range items.Content {
				if item.Kind != yaml.MappingNode {
					errorf(item.Line, fmt.Sprintf("items[%d]", j), "not an object")
					continue
				}
				add(item)
			}
			continue
		}
		add(root)
	}
	if len(errs) > 0 {
		return nil, nil, errs
	}
	return r, src, nil
}

// decodeStrict decodes a YAML mapping into obj through JSON, refusing
// unknown fields, as the API server's strict field validation does.
func decodeStrict(n *yaml.Node, obj any) error {
	var m any
	if err := n.Decode(&m); err != nil {
		return err
	}
	data, err := json.Marshal(m)
	if err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	return dec.Decode(obj)
}

// fieldOf is the path of the field a JSON decoding error is about.
func fieldOf(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return te.Field
	}
	msg := err.Error()
	if i := strings.Index(msg, "unknown field \""); i >= 0 {
		f := msg[i+len("unknown field \""):]
		if j := strings.IndexByte(f, '"'); j >= 0 {
			return f[:j]
		}
	}
	return ""
}

func cleanJSONError(err error) string {
	var te *json.UnmarshalTypeError
	if errors.As(err, &te) {
		return fmt.Sprintf("a %s where a %s is expected", te.Value, te.Type)
	}
	return strings.TrimPrefix(err.Error(), "json: ")
}

// recordLines stores the line of every field under n with its path.
func recordLines(lines map[string]int, prefix, path string, n *yaml.Node) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			p := n.Content[i].Value
			if path != "" {
				p = path + "." + p
			}
			lines[prefix+p] = n.Content[i].Line
			// A JSON unknown-field error names the key alone.
			if _, seen := lines[prefix+n.Content[i].Value]; !seen {
				lines[prefix+n.Content[i].Value] = n.Content[i].Line
			}
			recordLines(lines, prefix, p, n.Content[i+1])
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			p := path + "[" + strconv.Itoa(i) + "]"
			lines[prefix+p] = c.Line
			recordLines(lines, prefix, p, c)
		}
	case yaml.AliasNode:
		if n.Alias != nil {
			recordLines(lines, prefix, path, n.Alias)
		}
	}
}

func field(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	return nil
}

func scalarField(m *yaml.Node, key string) string {
	if n := field(m, key); n != nil && n.Kind == yaml.ScalarNode {
		return n.Value
	}
	return ""
}

// yamlErrorLine is the line a yaml.v3 error names, or 1.
func yamlErrorLine(err error) int {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if i := strings.IndexByte(rest, ':'); i > 0 {
			if n, err := strconv.Atoi(rest[:i]); err == nil {
				return n
			}
		}
	}
	return 1
}

// LooksLikeResources reports whether data's first document has a kind,
// so `bridgehead check` can tell a resource file from a config file.
func LooksLikeResources(data []byte) bool {
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil || len(doc.Content) == 0 {
		return false
	}
	root := doc.Content[0]
	return root.Kind == yaml.MappingNode && scalarField(root, "kind") != "" && scalarField(root, "apiVersion") != ""
}
