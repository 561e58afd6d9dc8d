package docgen

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"
)

// CRDField is one field of a CRD's OpenAPI schema.
type CRDField struct {
	Path, Type, Description, Validation string
}

// CRD is one CustomResourceDefinition's version with its fields.
type CRD struct {
	Kind, Group, Version, Scope, File string
	Fields                            []CRDField
}

// schema is the part of an OpenAPI v3 schema the reference shows.
type schema struct {
	Type        string            `yaml:"type"`
	Format      string            `yaml:"format"`
	Description string            `yaml:"description"`
	Properties  map[string]schema `yaml:"properties"`
	Items       *schema           `yaml:"items"`
	Required    []string          `yaml:"required"`
	Enum        []any             `yaml:"enum"`
	Pattern     string            `yaml:"pattern"`
	Minimum     *float64          `yaml:"minimum"`
	Maximum     *float64          `yaml:"maximum"`
	MinLength   *int              `yaml:"minLength"`
	MaxLength   *int              `yaml:"maxLength"`
	MinItems    *int              `yaml:"minItems"`
	MaxItems    *int              `yaml:"maxItems"`
	Default     any               `yaml:"default"`
	XValidation []map[string]any  `yaml:"x-kubernetes-validations"`
	Additional  *schema           `yaml:"additionalProperties"`
	Extra       map[string]any    `yaml:",inline"`
}

// crdFile is the part of a CRD file the reference reads.
type crdFile struct {
	Spec struct {
		Group string `yaml:"group"`
		Scope string `yaml:"scope"`
		Names struct {
			Kind string `yaml:"kind"`
		} `yaml:"names"`
		Versions []struct {
			Name   string `yaml:"name"`
			Schema struct {
				OpenAPIV3Schema schema `yaml:"openAPIV3Schema"`
			} `yaml:"schema"`
		} `yaml:"versions"`
	} `yaml:"spec"`
}

// CRDs reads every CRD under root/deploy/kubernetes (any .yaml file of
// kind CustomResourceDefinition), sorted by kind.
func CRDs(root string) ([]CRD, error) {
	var out []CRD
	base := filepath.Join(root, "deploy", "kubernetes")
	err := filepath.WalkDir(base, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".yaml") {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		if !bytes.Contains(data, []byte("kind: CustomResourceDefinition")) {
			return nil
		}
		var f crdFile
		if err := yaml.Unmarshal(data, &f); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		rel, _ := filepath.Rel(root, p)
		for _, v := range f.Spec.Versions {
			c := CRD{Kind: f.Spec.Names.Kind, Group: f.Spec.Group, Version: v.Name, Scope: f.Spec.Scope, File: filepath.ToSlash(rel)}
			walkSchema(v.Schema.OpenAPIV3Schema, "", nil, &c.Fields)
			out = append(out, c)
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].Version < out[j].Kind+out[j].Version })
	return out, err
}

// walkSchema appends the properties of s under prefix, depth first in
// name order. apiVersion, kind and metadata are the API's own.
func walkSchema(s schema, prefix string, required []string, out *[]CRDField) {
	names := make([]string, 0, len(s.Properties))
	for n := range s.Properties {
		if prefix == "" && (n == "apiVersion" || n == "kind" || n == "metadata") {
			continue
		}
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		p := s.Properties[n]
		path := n
		if prefix != "" {
			path = prefix + "." + n
		}
		*out = append(*out, CRDField{Path: path, Type: schemaType(p), Description: p.Description, Validation: validation(p, contains(s.Required, n))})
		switch {
		case p.Items != nil && len(p.Items.Properties) > 0:
			walkSchema(*p.Items, path+"[]", nil, out)
		case len(p.Properties) > 0:
			walkSchema(p, path, nil, out)
		}
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// schemaType is the type column: "array of string", "string (date-time)".
func schemaType(s schema) string {
	t := s.Type
	if t == "" && s.Extra["x-kubernetes-int-or-string"] == true {
		t = "integer or string"
	}
	if s.Format != "" {
		t += " (" + s.Format + ")"
	}
	if s.Items != nil {
		t += " of " + schemaType(*s.Items)
	}
	if s.Additional != nil {
		t += " of " + schemaType(*s.Additional)
	}
	return t
}

// validation lists a field's constraints.
func validation(s schema, required bool) string {
	var v []string
	if required {
		v = append(v, "required")
	}
	if len(s.Enum) > 0 {
		var e []string
		for _, x := range s.Enum {
			e = append(e, fmt.Sprint(x))
		}
		v = append(v, "one of "+strings.Join(e, ", "))
	}
	if s.Default != nil {
		v = append(v, fmt.Sprintf("default %v", s.Default))
	}
	add := func(name string, p *int) {
		if p != nil {
			v = append(v, fmt.Sprintf("%s %d", name, *p))
		}
	}
	if s.Minimum != nil {
		v = append(v, fmt.Sprintf("minimum %v", *s.Minimum))
	}
	if s.Maximum != nil {
		v = append(v, fmt.Sprintf("maximum %v", *s.Maximum))
	}
	add("minLength", s.MinLength)
	add("maxLength", s.MaxLength)
	add("minItems", s.MinItems)
	add("maxItems", s.MaxItems)
	if s.Pattern != "" {
		v = append(v, "pattern `"+s.Pattern+"`")
	}
	for k, x := range s.Extra {
		if strings.HasPrefix(k, "x-kubernetes-list") || k == "format" {
			v = append(v, fmt.Sprintf("%s: %v", k, x))
		}
	}
	for _, r := range s.XValidation {
		v = append(v, fmt.Sprintf("rule `%v`: %v", r["rule"], r["message"]))
	}
	sort.Strings(v[min(len(v), boolInt(required)):])
	return strings.Join(v, "; ")
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// CRDReference renders docs/reference/crd.md.
func CRDReference(crds []CRD) []byte {
	var b bytes.Buffer
	b.WriteString(generatedBy("the OpenAPI schemas of the CRDs in deploy/kubernetes"))
	b.WriteString("# Custom resources reference\n\n")
	b.WriteString("Every field of bridgehead's custom resources, from their OpenAPI schemas: what the API server validates.\n")
	for _, c := range crds {
		fmt.Fprintf(&b, "\n## %s\n\n`%s/%s`, %s-scoped, defined in `%s`.\n\n", c.Kind, c.Group, c.Version, c.Scope, c.File)
		b.WriteString("| Field | Type | Validation | Description |\n|---|---|---|---|\n")
		for _, f := range c.Fields {
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Path, f.Type, cell(f.Validation), cell(f.Description))
		}
	}
	return b.Bytes()
}
