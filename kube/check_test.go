package kube

import (
	"bytes"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/bridgehead/bridgehead/config"
	"gopkg.in/yaml.v3"
)

// resourcesOf converts the config testdata file into resource YAML.
func resourcesOf(t *testing.T) ([]byte, *config.Config) {
	t.Helper()
	c, err := config.Load("testdata/catalog.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := WriteResources(&buf, r, true); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes(), c
}

// TestCatalogThroughResourceYAML: config file -> resource YAML -> decode
// -> catalog YAML -> config.Parse gives the same sites.
func TestCatalogThroughResourceYAML(t *testing.T) {
	data, c := resourcesOf(t)
	r, _, err := Decode("r.yaml", data)
	if err != nil {
		t.Fatalf("decode:\n%v\n%s", err, data)
	}
	back, err := ToConfig(r, Local{Site: c.Site, Gateway: c.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	back.PrivateKeyFile = c.PrivateKeyFile
	var buf bytes.Buffer
	if err := WriteCatalog(&buf, back); err != nil {
		t.Fatal(err)
	}
	parsed, err := config.Parse("back.yaml", buf.Bytes())
	if err != nil {
		t.Fatalf("parse the written catalog: %v\n%s", err, buf.Bytes())
	}
	if !reflect.DeepEqual(parsed.Sites, c.Sites) {
		t.Errorf("sites differ:\n got %+v\nwant %+v\n%s", parsed.Sites, c.Sites, buf.Bytes())
	}
}

func TestCheckResources(t *testing.T) {
	good, _ := resourcesOf(t)
	if _, problems, _ := CheckResources("good.yaml", good, config.CheckOptions{}); len(problems) > 0 {
		t.Fatalf("valid resources: %v\n%s", problems, good)
	}
	tests := []struct {
		name        string
		old, new    string
		wantLine    string // the line of the file holding this text
		wantInMsg   string
		wantInField string
	}{
		{"overlap", "- 10.245.0.0/16", "- 10.244.0.0/16", "- 10.244.0.0/16\n", "overlaps Site a: spec.podCIDRs[0] (line 13)", "Site b: spec.podCIDRs[0]"},
		{"gateway address outside", "address: 10.0.0.10", "address: 10.9.0.10", "address: 10.9.0.10", "not inside the nodeCIDRs", "Gateway a.gw-a1: spec.address"},
		{"unknown field", "nodeCIDRs:", "nodeCIDR:", "nodeCIDR:", "unknown field", "Site a: nodeCIDR"},
		{"bad cidr", "- 10.0.0.0/16", "- 10.0.0.0/33", "10.0.0.0/33", "not a CIDR", "Site a: spec.nodeCIDRs[0]"},
		{"wrong type", "podBlockSize: 24", "podBlockSize: [24]", "podBlockSize: [24]", "expected", "Site a: spec.podBlockSize"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !bytes.Contains(good, []byte(tc.old)) {
				t.Fatalf("%q not in\n%s", tc.old, good)
			}
			data := bytes.Replace(good, []byte(tc.old), []byte(tc.new), 1)
			c, problems, _ := CheckResources("bad.yaml", data, config.CheckOptions{})
			if c != nil || len(problems) == 0 {
				t.Fatalf("no problem found in\n%s", data)
			}
			want := lineOf(data, tc.wantLine)
			for _, p := range problems {
				if strings.Contains(p.Msg, tc.wantInMsg) && strings.Contains(p.Field, tc.wantInField) {
					if p.Line != want || p.File != "bad.yaml" {
						t.Errorf("%v: at %s:%d, want bad.yaml:%d", p, p.File, p.Line, want)
					}
					return
				}
			}
			t.Errorf("problems %v: none with %q in the message and %q in the field", problems, tc.wantInMsg, tc.wantInField)
		})
	}
}

// lineOf is the line of the last occurrence of s.
func lineOf(data []byte, s string) int {
	i := bytes.LastIndex(data, []byte(s))
	if i < 0 {
		return -1
	}
	return bytes.Count(data[:i], []byte("\n")) + 1
}

func TestDecodeRefuses(t *testing.T) {
	tests := []struct{ name, data, want string }{
		{"other kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", `v1 "Pod" is not a resource of the catalog`},
		{"no name", "apiVersion: bridgehead.io/v1alpha1\nkind: Site\nspec: {}\n", "Site without a name"},
		{"twice", "apiVersion: bridgehead.io/v1alpha1\nkind: Site\nmetadata: {name: a}\n---\napiVersion: bridgehead.io/v1alpha1\nkind: Site\nmetadata: {name: a}\n", "x.yaml:5: metadata.name: Site a is listed twice (also line 1)"},
		{"syntax", "apiVersion: v1\nkind: [\n", "x.yaml:"},
		{"scalar", "hello\n", "is not an object"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := Decode("x.yaml", []byte(tc.data))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Decode: %v, want %q", err, tc.want)
			}
		})
	}
}

// FuzzDecode: any input decodes or is refused with an error; what
// decodes converts, renders and converts again without panicking.
func FuzzDecode(f *testing.F) {
	if data, err := os.ReadFile("testdata/catalog.yaml"); err == nil {
		if c, err := config.Parse("valid.yaml", data); err == nil {
			if r, err := FromConfig(c); err == nil {
				var buf bytes.Buffer
				if WriteResources(&buf, r, true) == nil {
					f.Add(buf.Bytes())
				}
			}
		}
	}
	f.Add([]byte("apiVersion: bridgehead.io/v1alpha1\nkind: Gateway\nmetadata: {name: a.g}\nspec: {site: a, address: 10.0.0.1}\n"))
	f.Add([]byte("---\n---\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		r, src, err := Decode("f.yaml", data)
		if err != nil {
			return
		}
		_ = src.Line("Site", "a", "spec.nodeCIDRs[0]")
		local, _ := firstGateway(r)
		c, err := ToConfig(r, local)
		if err != nil {
			return
		}
		var buf bytes.Buffer
		if err := WriteCatalog(&buf, c); err != nil {
			t.Fatalf("WriteCatalog: %v", err)
		}
		_, _, _ = CheckResources("f.yaml", data, config.CheckOptions{SkipPrivateKey: true})
	})
}

// TestGatewayRBACObjects: one ServiceAccount, and a ClusterRole naming
// only the gateway's own status, bound to it alone. The refusals
// themselves are tested against the API server (deploy/kubernetes).
func TestGatewayRBACObjects(t *testing.T) {
	var buf bytes.Buffer
	if err := WriteObjects(&buf, GatewayRBAC("east.gw1")); err != nil {
		t.Fatal(err)
	}
	out := buf.String()
	for _, want := range []string{
		"kind: ServiceAccount\nmetadata:\n  labels:\n    app.kubernetes.io/part-of: bridgehead\n    bridgehead.io/gateway: east.gw1\n  name: east.gw1\n  namespace: bridgehead-gateways\n",
		"resourceNames:\n  - east.gw1\n  resources:\n  - gateways/status\n  verbs:\n  - get\n  - update\n  - patch\n",
		"name: bridgehead-gateway:east.gw1\nroleRef:",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("RBAC objects lack\n%s\nin\n%s", want, out)
		}
	}
	if strings.Count(out, "resources:") != 1 {
		t.Errorf("the gateway's own ClusterRole grants more than its status:\n%s", out)
	}
}

// TestDecodeList: what `kubectl get sites,gateways -o yaml` prints, one
// v1 List with the objects under items, decodes to the same resources
// as the documents one by one; a List without items is refused.
func TestDecodeList(t *testing.T) {
	docs, _ := resourcesOf(t)
	want, _, err := Decode("docs.yaml", docs)
	if err != nil {
		t.Fatal(err)
	}
	var items []any
	dec := yaml.NewDecoder(bytes.NewReader(docs))
	for {
		var obj any
		if err := dec.Decode(&obj); err != nil {
			break
		}
		if obj != nil {
			items = append(items, obj)
		}
	}
	list, err := yaml.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
	if err != nil {
		t.Fatal(err)
	}
	got, _, err := Decode("list.yaml", list)
	if err != nil {
		t.Fatalf("decode the List: %v\n%s", err, list)
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("the List decodes differently:\n got %+v\nwant %+v", got, want)
	}
	for _, bad := range []string{"apiVersion: v1\nkind: List\n", "apiVersion: v1\nkind: List\nitems: [3]\n"} {
		if _, _, err := Decode("x.yaml", []byte(bad)); err == nil {
			t.Errorf("Decode(%q) accepted", bad)
		}
	}
}
