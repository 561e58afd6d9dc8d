package kube

import (
	"bytes"
	"encoding/json"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/bridgehead/bridgehead/config"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// TestSitePolicyPaths: a site's allowedSources, absent (every site),
// empty (none) or a list, comes back the same through every path a
// catalog takes: Site objects (FromConfig, JSON as the API server stores
// them, ToConfig), and the catalog YAML (WriteCatalog, read by the
// config decoder and by yaml.v3 as catalog.DecodeBase does).
func TestSitePolicyPaths(t *testing.T) {
	gw := func(ep string) []config.Gateway {
		return []config.Gateway{{Name: "gw", Endpoint: ep, PublicKey: "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="}}
	}
	for _, list := range []config.SiteSources{nil, {}, {"b"}} {
		c := &config.Config{Sites: []config.Site{
			{Name: "a", AllowedSources: list, Gateways: gw("203.0.113.1:51820")},
			{Name: "b", Gateways: []config.Gateway{{Name: "gw", Endpoint: "203.0.113.2:51820", PublicKey: "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="}}},
		}}
		same := func(how string, got config.SiteSources) {
			t.Helper()
			if (got == nil) != (list == nil) || !slices.Equal(got, list) {
				t.Errorf("%#v through %s: %#v", list, how, got)
			}
		}
		// Site objects, through JSON.
		r, err := FromConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(r.Sites[0])
		if err != nil {
			t.Fatal(err)
		}
		var site v1.Site
		if err := json.Unmarshal(b, &site); err != nil {
			t.Fatal(err)
		}
		r.Sites[0] = site
		back, err := ToConfig(r, Local{})
		if err != nil {
			t.Fatal(err)
		}
		same("Site objects", back.Sites[0].AllowedSources)

		// The catalog YAML.
		var buf bytes.Buffer
		if err := WriteCatalog(&buf, c); err != nil {
			t.Fatal(err)
		}
		parsed, err := config.ParseSites("catalog.yaml", buf.Bytes())
		if err != nil {
			t.Fatalf("%v\n%s", err, buf.String())
		}
		same("WriteCatalog and ParseSites", parsed.Sites[0].AllowedSources)
		var doc struct {
			Sites []config.Site `yaml:"sites"`
		}
		if err := yaml.Unmarshal(buf.Bytes(), &doc); err != nil {
			t.Fatal(err)
		}
		same("WriteCatalog and yaml.v3", doc.Sites[0].AllowedSources)
	}
}

// TestSitePolicyCheckPlan: a Site whose allowedSources names no Site is
// a problem of that Site, on its field (the controller leaves that Site
// out and says so in its Valid condition, as for any invalid field).
func TestSitePolicyCheckPlan(t *testing.T) {
	c := &config.Config{Sites: []config.Site{
		{Name: "a", AllowedSources: config.SiteSources{"b", "gone"},
			NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.1.0.0/16")}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.101.0.0/16")},
			Gateways: []config.Gateway{{Name: "gw", Address: netip.MustParseAddr("10.1.0.4"), Endpoint: "203.0.113.1:51820", PublicKey: "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="}}},
		{Name: "b", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.2.0.0/16")}, PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.102.0.0/16")},
			Gateways: []config.Gateway{{Name: "gw", Address: netip.MustParseAddr("10.2.0.4"), Endpoint: "203.0.113.2:51820", PublicKey: "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="}}},
	}}
	r, err := FromConfig(c)
	if err != nil {
		t.Fatal(err)
	}
	_, problems, _ := CheckPlan(r)
	if len(problems) != 1 {
		t.Fatalf("problems %v, want one", problems)
	}
	p := problems[0]
	if p.Site != "a" || p.Kind != "Site" || p.Name != "a" || p.Field != "spec.allowedSources[1]" || !strings.Contains(p.Msg, `"gone" is not a site`) {
		t.Errorf("problem %+v", p)
	}
}
