package config

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// policyCatalog is a three-site catalog (a, b, c); site b's
// allowedSources line is list (none when empty).
func policyCatalog(t *testing.T, list string) string {
	t.Helper()
	data := hubCatalog(t, []hubSite{{name: "a", endpoints: []bool{true}}, {name: "b", endpoints: []bool{true}}, {name: "c", endpoints: []bool{true}}}, nil)
	if list == "" {
		return data
	}
	return strings.Replace(data, "  - name: b\n", "  - name: b\n    allowedSources: "+list+"\n", 1)
}

// TestSitePolicyDecode: absent and null are nil (every site); [] is an
// empty, non-nil list (no remote site); names are kept in order.
func TestSitePolicyDecode(t *testing.T) {
	for _, c := range []struct {
		list      string
		want      SiteSources
		restricts bool
	}{
		{"", nil, false},
		{"null", nil, false},
		{"[]", SiteSources{}, true},
		{"[a]", SiteSources{"a"}, true},
		{"\n      - c\n      - a", SiteSources{"c", "a"}, true},
	} {
		t.Run(c.list, func(t *testing.T) {
			cfg, problems, _ := CheckData("c.yaml", []byte(policyCatalog(t, c.list)), CheckOptions{SkipPrivateKey: true})
			if len(problems) > 0 {
				t.Fatal(problems)
			}
			got := cfg.Sites[1].AllowedSources
			if !slices.Equal(got, c.want) || got.Restricts() != c.restricts {
				t.Errorf("allowedSources = %#v (restricts %v), want %#v (%v)", got, got.Restricts(), c.want, c.restricts)
			}
		})
	}
}

// TestCheckSitePolicy: unknown names (with a suggestion) and duplicates
// are problems naming the file, line and field; a site naming itself is
// a warning.
func TestCheckSitePolicy(t *testing.T) {
	for _, c := range []struct {
		list     string
		problems []string
		warnings []string
	}{
		{"[a, c]", nil, nil},
		{"[a, d]", []string{`c.yaml:%d: sites[1].allowedSources[1]: "d" is not a site`}, nil},
		{"[A]", []string{`c.yaml:%d: sites[1].allowedSources[0]: "A" is not a site (did you mean "a"?)`}, nil},
		{"[a, a]", []string{`c.yaml:%d: sites[1].allowedSources[1]: "a" is listed twice`}, nil},
		{"[b]", nil, []string{`c.yaml:%d: sites[1].allowedSources[0]: "b" is this site itself`}},
	} {
		t.Run(c.list, func(t *testing.T) {
			data := policyCatalog(t, c.list)
			line := lineWith(data, "allowedSources:", 1)
			_, problems, warnings := CheckData("c.yaml", []byte(data), CheckOptions{SkipPrivateKey: true})
			match := func(kind string, got ErrorList, want []string) {
				t.Helper()
				if len(got) != len(want) {
					t.Fatalf("%s: %v, want %d", kind, got, len(want))
				}
				for i, w := range want {
					if w = fmt.Sprintf(w, line); !strings.HasPrefix(got[i].Error(), w) {
						t.Errorf("%s %d:\n got %s\nwant %s...", kind, i, got[i], w)
					}
				}
			}
			match("problems", problems, c.problems)
			match("warnings", warnings, c.warnings)
		})
	}
}

// TestSitePolicyCatalogRoundTrip: the catalog's own encoding (yaml.v3,
// as kube.WriteCatalog's consumers decode it) keeps absent and empty
// apart: an absent list is left out, an empty one is written.
func TestSitePolicyCatalogRoundTrip(t *testing.T) {
	for _, l := range []SiteSources{nil, {}, {"a", "b"}} {
		b, err := yaml.Marshal(Site{Name: "x", AllowedSources: l})
		if err != nil {
			t.Fatal(err)
		}
		var back Site
		if err := yaml.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.AllowedSources.Restricts() != l.Restricts() || !slices.Equal(back.AllowedSources, l) {
			t.Errorf("%#v → %q → %#v", l, b, back.AllowedSources)
		}
		if l == nil && strings.Contains(string(b), "allowedSources") {
			t.Errorf("absent list written: %q", b)
		}
	}
}

// FuzzSiteSources puts arbitrary text where site b's allowedSources list
// goes: the check must never panic, and a file it accepts names only
// sites, each once.
func FuzzSiteSources(f *testing.F) {
	for _, s := range []string{"[]", "[a, c]", "[a, a]", "[d]", "null", "{a: b}", "\n      - a\n      - c", "[*x]", "&x [a]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, list string) {
		if list == "" {
			return // policyCatalog leaves the field out
		}
		data := policyCatalog(t, list)
		c, problems, _ := CheckData("c.yaml", []byte(data), CheckOptions{SkipPrivateKey: true})
		if len(problems) > 0 || c == nil {
			return
		}
		seen := map[string]bool{}
		for _, name := range c.Sites[1].AllowedSources {
			if c.SiteByName(name) == nil || seen[name] {
				t.Fatalf("accepted %q: allowedSources %q", list, c.Sites[1].AllowedSources)
			}
			seen[name] = true
		}
	})
}
