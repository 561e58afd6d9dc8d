package daemon

import (
	"net/netip"
	"slices"
	"testing"

	"github.com/bridgehead/bridgehead/config"
)

// TestRouterConfigSitePolicy: each site's pod CIDRs and allow-list reach
// the router as they are, absent (nil: every site) and empty (none) kept
// apart.
func TestRouterConfigSitePolicy(t *testing.T) {
	pods := []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd00:244::/56")}
	for _, list := range []config.SiteSources{nil, {}, {"b"}} {
		c := &config.Config{Site: "a", Gateway: "gw", Sites: []config.Site{
			{Name: "a", PodCIDRs: pods, AllowedSources: list,
				Gateways: []config.Gateway{{Name: "gw", Endpoint: "203.0.113.1:51820", PublicKey: "Wo7vmKLHELWcx9ZwOYMvcGa65oyEhxdw0wWX+scW8Uw="}}},
			{Name: "b", Gateways: []config.Gateway{{Name: "gw", Endpoint: "203.0.113.2:51820", PublicKey: "6AW+BSks3nW8Q0PyZle1TunW366L+puG38nEpGJnoB8="}}},
		}}
		rc, err := routerConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		a, b := rc.Sites[0], rc.Sites[1]
		if !slices.Equal(a.PodPrefixes, pods) || (a.AllowedSources == nil) != (list == nil) || !slices.Equal(a.AllowedSources, list) {
			t.Errorf("list %#v: site a became pods %v, allowedSources %#v", list, a.PodPrefixes, a.AllowedSources)
		}
		if b.AllowedSources != nil || len(b.PodPrefixes) != 0 {
			t.Errorf("site b became pods %v, allowedSources %#v", b.PodPrefixes, b.AllowedSources)
		}
	}
}
