package docgen

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
)

// commentedField is a line of the example holding a field that cannot
// be set with the rest of the file: "#" then the field, no space.
var commentedField = regexp.MustCompile(`(?m)^(\s*)#([A-Za-z][A-Za-z0-9]*:.*)$`)

// MissingFromExample lists the config fields (YAML paths) the example
// file data does not set, walking config.Config by reflection. A field
// counts as present when it is set in any element of a list, or written
// as a commented field ("#namespace: x").
func MissingFromExample(data []byte) ([]string, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(commentedField.ReplaceAll(data, []byte("$1$2")), &root); err != nil {
		return nil, fmt.Errorf("the example with its commented fields: %w", err)
	}
	if len(root.Content) != 1 {
		return nil, fmt.Errorf("the example is not one YAML document")
	}
	var missing []string
	missingIn(reflect.TypeFor[config.Config](), "", []*yaml.Node{root.Content[0]}, &missing)
	sort.Strings(missing)
	return missing, nil
}

// missingIn appends the fields of struct t that none of the mappings in
// maps sets.
func missingIn(t reflect.Type, prefix string, maps []*yaml.Node, missing *[]string) {
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
		var values []*yaml.Node
		for _, m := range maps {
			if v := mapValue(m, name); v != nil {
				values = append(values, v)
			}
		}
		if len(values) == 0 {
			*missing = append(*missing, path)
			continue
		}
		elem, list := sectionOf(sf.Type)
		if elem == nil {
			continue
		}
		if list {
			path += "[]"
			var items []*yaml.Node
			for _, v := range values {
				items = append(items, v.Content...)
			}
			values = items
		}
		missingIn(elem, path, values, missing)
	}
}

// mapValue is the value of key in mapping m, or nil.
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
