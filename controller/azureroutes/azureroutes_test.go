package azureroutes

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v6"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/controller/azureroutes/armfake"
	"github.com/bridgehead/bridgehead/noderoutes"
)

// catalog is two sites: "azure" (the table's, behind an internal load
// balancer at 10.10.0.100, n dual-stack nodes) and "onprem".
func catalog(n int) *config.Config {
	az := config.Site{Name: "azure", RouterAddress: netip.MustParseAddr("10.10.0.100"), RouterAddress6: netip.MustParseAddr("fd10::100"),
		NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("10.10.0.0/16"), netip.MustParsePrefix("fd10::/64")},
		PodCIDRs:  []netip.Prefix{netip.MustParsePrefix("10.244.0.0/16"), netip.MustParsePrefix("fd20::/56")},
		Gateways:  []config.Gateway{{Name: "gw1", Address: netip.MustParseAddr("10.10.0.4"), Address6: netip.MustParseAddr("fd10::4"), Endpoint: "198.51.100.1:51820", PublicKey: "6Tu8zB0KFnP1vXXK5C8ahHpmeiCLMM5JQ0l32OchwXY="}}}
	for i := range n {
		az.Nodes = append(az.Nodes, config.Node{Name: fmt.Sprintf("aks-node-%d", i),
			Address: netip.AddrFrom4([4]byte{10, 10, 1, byte(10 + i)}), PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(i), 0}), 24),
			Address6: netip.MustParseAddr(fmt.Sprintf("fd10::1:%x", 10+i)), PodCIDR6: netip.MustParsePrefix(fmt.Sprintf("fd20:0:0:%x::/64", i))})
	}
	op := config.Site{Name: "onprem", NodeCIDRs: []netip.Prefix{netip.MustParsePrefix("192.168.40.0/24"), netip.MustParsePrefix("fd30::/64")},
		PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.245.0.0/16"), netip.MustParsePrefix("fd40::/56")},
		Gateways: []config.Gateway{{Name: "gw1", Address: netip.MustParseAddr("192.168.40.2"), Address6: netip.MustParseAddr("fd30::2"), Endpoint: "203.0.113.7:51820", PublicKey: "Vd1pqIc8mzlTfnBeqUaPDv5/A+oXwb0lL3ZtF4JT1lg="}}}
	return &config.Config{Sites: []config.Site{az, op}}
}

// want is the table the catalog asks for, as fakeARM.contents lists it.
func want(t *testing.T, c *config.Config, extra ...string) []string {
	t.Helper()
	rs, err := noderoutes.AzureRoutes(c, "azure")
	if err != nil {
		t.Fatal(err)
	}
	out := slices.Clone(extra)
	for _, r := range rs {
		out = append(out, r.Name+" "+r.Destination.String()+" "+r.Via.String())
	}
	slices.Sort(out)
	return out
}

func newSyncer(t *testing.T, f *armfake.Server) *Syncer {
	t.Helper()
	s, err := New(Options{Client: f.Client(t), ResourceGroup: f.ResourceGroup, RouteTable: f.RouteTable, Site: "azure", Registry: prometheus.NewRegistry(), Parallel: 16})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// TestSync: against the ARM fake, through the real armnetwork client,
// the table follows the catalog step by step: built from empty, a join
// adds the node's two routes, a leave deletes them, a route edited or
// deleted by hand comes back, a stale owned route goes, the operator's
// own routes stay, and a Sync with nothing to do writes nothing.
func TestSync(t *testing.T) {
	f := armfake.New(t)
	s := newSyncer(t, f)
	ctx := context.Background()
	foreign := "to-firewall 0.0.0.0/0 10.10.0.250"
	f.Edit(func(routes map[string]armfake.Route) {
		routes["to-firewall"] = armfake.Route{Name: "to-firewall", Prefix: "0.0.0.0/0", HopType: "VirtualAppliance", HopIP: "10.10.0.250", Etag: 1}
	})
	for _, step := range []struct {
		name  string
		nodes int
		edit  func(map[string]armfake.Route)
		res   Result
	}{
		{"from empty", 10, nil, Result{Wanted: 24, Created: 24}},
		{"nothing to do", 10, nil, Result{Wanted: 24, Unchanged: 24}},
		{"a join", 11, nil, Result{Wanted: 26, Created: 2, Unchanged: 24}},
		{"a leave", 10, nil, Result{Wanted: 24, Deleted: 2, Unchanged: 24}},
		{"edited and deleted by hand, a stale one of ours", 10, func(routes map[string]armfake.Route) {
			r := routes["bh-azure-pod-10.244.3.0_24"]
			r.HopIP = "10.10.1.99"
			routes["bh-azure-pod-10.244.3.0_24"] = r
			delete(routes, "bh-onprem-pod-10.245.0.0_16")
			routes["bh-gone-pod-10.9.0.0_16"] = armfake.Route{Name: "bh-gone-pod-10.9.0.0_16", Prefix: "10.9.0.0/16", HopType: "VirtualAppliance", HopIP: "10.10.0.100"}
		}, Result{Wanted: 24, Created: 1, Updated: 1, Deleted: 1, Unchanged: 22}},
	} {
		t.Run(step.name, func(t *testing.T) {
			if step.edit != nil {
				f.Edit(step.edit)
			}
			writes, _ := f.Requests()
			c := catalog(step.nodes)
			res, err := s.Sync(ctx, c)
			if err != nil {
				t.Fatal(err)
			}
			if res != step.res {
				t.Errorf("result %+v, want %+v", res, step.res)
			}
			if got, w := f.Contents(), want(t, c, foreign); !slices.Equal(got, w) {
				t.Fatalf("table\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
			}
			if w, _ := f.Requests(); w-writes != res.Created+res.Updated+res.Deleted {
				n := w - writes
				t.Errorf("%d writes for %+v", n, res)
			}
		})
	}
	if _, lists := f.Requests(); lists < 2*5 {
		t.Errorf("%d list pages: the table's %d routes take more than one page of %d each Sync", lists, 25, f.PageSize())
	}
}

// TestSyncRefuses: over Azure's 400 routes a table, nothing is written;
// a write the server fails fails the Sync after the others landed, and
// the next Sync finishes the job; throttling (429) is retried.
func TestSyncRefuses(t *testing.T) {
	ctx := context.Background()
	t.Run("over 400 routes", func(t *testing.T) {
		f := armfake.New(t)
		s := newSyncer(t, f)
		_, err := s.Sync(ctx, catalog(199)) // 4 remote + 398 node routes
		if w, _ := f.Requests(); err == nil || !strings.Contains(err.Error(), "over Azure's 400 routes") || w != 0 {
			t.Fatalf("err %v, %d writes", err, w)
		}
	})
	t.Run("a write fails", func(t *testing.T) {
		f := armfake.New(t)
		s := newSyncer(t, f)
		f.Fail("bh-azure-pod-10.244.2.0_24", true)
		_, err := s.Sync(ctx, catalog(4))
		if err == nil || !strings.Contains(err.Error(), "bh-azure-pod-10.244.2.0_24") {
			t.Fatalf("err %v", err)
		}
		if got := len(f.Contents()); got != 11 {
			t.Fatalf("%d routes after the failed Sync, want the other 11", got)
		}
		f.Fail("bh-azure-pod-10.244.2.0_24", false)
		res, err := s.Sync(ctx, catalog(4))
		if err != nil || res.Created != 1 || !slices.Equal(f.Contents(), want(t, catalog(4))) {
			t.Fatalf("second Sync: %+v, %v", res, err)
		}
	})
	t.Run("throttled", func(t *testing.T) {
		f := armfake.New(t)
		s := newSyncer(t, f)
		f.Throttle(3)
		res, err := s.Sync(ctx, catalog(2))
		if w, _ := f.Requests(); err != nil || res.Created != 8 || w != 8+3 || !slices.Equal(f.Contents(), want(t, catalog(2))) {
			t.Fatalf("%+v, %v, %d writes", res, err, w)
		}
	})
}

// TestFakeRefusesWhatAzureRefuses: the fake is only as good as its
// refusals; each answers the error code Azure does.
func TestFakeRefusesWhatAzureRefuses(t *testing.T) {
	f := armfake.New(t)
	c := f.Client(t)
	ctx := context.Background()
	put := func(name, prefix, via string) error {
		p, err := c.BeginCreateOrUpdate(ctx, f.ResourceGroup, f.RouteTable, name, armnetwork.Route{Properties: &armnetwork.RoutePropertiesFormat{
			AddressPrefix: ptr(prefix), NextHopType: ptr(armnetwork.RouteNextHopTypeVirtualAppliance), NextHopIPAddress: ptr(via)}}, nil)
		if err == nil {
			_, err = p.PollUntilDone(ctx, pollEvery)
		}
		return err
	}
	if err := put("bh-a", "10.1.0.0/16", "10.10.0.4"); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, prefix, via, code string }{
		{"bh-b", "10.1.0.0/16", "10.10.0.4", "InvalidRouteTableDuplicateAddressPrefix"},
		{"bh-c", "10.1.0.1/16", "10.10.0.4", "InvalidCIDRNotation"},
		{"bh-d", "10.2.0.0/16", "fd00::1", "InvalidNextHopIpAddress"},
		{"bh-e-", "10.3.0.0/16", "10.10.0.4", "InvalidResourceName"},
	} {
		if err := put(tc.name, tc.prefix, tc.via); err == nil || !strings.Contains(err.Error(), tc.code) {
			t.Errorf("%s %s via %s: %v, want %s", tc.name, tc.prefix, tc.via, err, tc.code)
		}
	}
	if err := put("BH-A", "10.1.0.0/16", "10.10.0.5"); err != nil || f.Contents()[0] != "bh-a 10.1.0.0/16 10.10.0.5" {
		t.Fatalf("names are case-insensitive: %v %v", err, f.Contents())
	}
}
