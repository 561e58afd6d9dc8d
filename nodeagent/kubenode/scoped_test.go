package kubenode

import (
	"bytes"
	"context"
	"log/slog"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/internal/syncbuf"
)

// gauge is the value of the series name{labels} on reg (summed over the
// series that match), and whether there is one.
func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum, found := 0.0, false
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if v, ok := labels[lp.GetName()]; ok && v != lp.GetValue() {
					continue metric
				}
			}
			found = true
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum, found
}

// TestScopedCatalogCheck: the agent of a1 takes a published catalog in
// which an entry that concerns only another node or another site is bad
// (it skips the entry, counts it in bridgehead_node_catalog_skipped_entries,
// logs it once and reports it for the condition), and refuses one whose
// bad entry concerns what it installs (its own node, another site's CIDRs
// against its service CIDRs): the follower keeps the last good catalog
// file, so the model stays the last good one, and the log names the
// field. Each publication also joins a3, which shows whether it was
// taken.
func TestScopedCatalogCheck(t *testing.T) {
	pfx := netip.MustParsePrefix
	const joined = "10.244.3.0/24 via 10.224.0.13"
	for _, tc := range []struct {
		name   string
		mutate func([]config.Site)
		// field: named in the log (and the condition's summary when
		// skipped); skipped: the gauge; noRoute: a route the model must
		// not have.
		field   string
		refused bool
		skipped float64
		noRoute string
	}{
		{name: "other node of its site out of the pool",
			mutate: func(s []config.Site) { s[0].Nodes[1].PodCIDR = pfx("10.245.9.0/24") },
			field:  "sites[0].nodes[1].podCIDR", skipped: 1, noRoute: "10.245.9.0/24"},
		{name: "gateway of another site out of its node CIDRs",
			mutate: func(s []config.Site) { s[1].Gateways[1].Address = netip.MustParseAddr("10.9.9.9") },
			field:  "sites[1].gateways[1].address", skipped: 1},
		// Another site's nodes never reach this agent (it follows its
		// own site's slices): nothing to skip, and the update is taken.
		{name: "node of another site out of its pool",
			mutate: func(s []config.Site) { s[1].Nodes[0].PodCIDR = pfx("10.244.9.0/24") }},
		{name: "its own node out of the pool",
			mutate: func(s []config.Site) { s[0].Nodes[0].PodCIDR = pfx("10.245.9.0/24") },
			field:  "sites[0].nodes[0].podCIDR", refused: true},
		{name: "another site's CIDR over its service CIDRs",
			mutate: func(s []config.Site) { s[1].NodeCIDRs = append(s[1].NodeCIDRs, pfx("10.96.128.0/24")) },
			field:  "sites[1].nodeCIDRs[2]", refused: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ctx := context.Background()
			client := fake.NewClientset(node("a1", "a", nil, "10.224.0.11"))
			for _, cm := range published(t, nil) {
				if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			reg := prometheus.NewRegistry()
			var logs syncbuf.Buffer
			var mu sync.Mutex
			var reported []string
			cfg := nodeConfig(t)
			sctx, cancel := context.WithCancel(ctx)
			s, err := New(sctx, Options{Client: client, Node: "a1", Namespace: config.DefaultCatalogNamespace, Catalog: cfg,
				ServiceCIDRs: serviceCIDRs, Recorder: record.NewFakeRecorder(10), Log: slog.New(slog.NewTextHandler(&logs, nil)),
				Registry: reg, Skipped: func(sum string) { mu.Lock(); reported = append(reported, sum); mu.Unlock() }})
			if err != nil {
				cancel()
				t.Fatal(err)
			}
			t.Cleanup(func() {
				cancel()
				s.Wait()
				time.Sleep(50 * time.Millisecond) // the file watcher sees the end
			})
			good := routeList(loadWhen(t, s))
			goodFile, err := os.ReadFile(cfg)
			if err != nil {
				t.Fatal(err)
			}

			for _, cm := range published(t, func(sites []config.Site) {
				n := sites[0].Nodes[1]
				n.Name, n.Address, n.Address6 = "a3", n.Address.Next(), n.Address6.Next()
				n.PodCIDR, n.PodCIDR6 = pfx("10.244.3.0/24"), pfx("fd00:244:0:3::/64")
				sites[0].Nodes = append(sites[0].Nodes, n)
				tc.mutate(sites)
			}) {
				if _, err := client.CoreV1().ConfigMaps(cm.Namespace).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
					t.Fatal(err)
				}
			}

			deadline := time.Now().Add(20 * time.Second) // a failure bound
			var routes string
			for {
				if tc.refused {
					if n, _ := gauge(t, reg, "bridgehead_follow_refused_total", map[string]string{"state": "refused"}); n > 0 {
						break
					}
				} else if routes = routeList(loadWhen(t, s)); strings.Contains(routes, joined) {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("the publication was neither taken nor refused; routes:\n%s\nlog:\n%s", routes, logs.String())
				}
				select {
				case <-s.Changed():
				case <-time.After(100 * time.Millisecond):
				}
			}
			// Load again: a skip is logged and reported once, not per Load.
			d, err := s.Load()
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			routes = routeList(d)
			skipped, ok := gauge(t, reg, "bridgehead_node_catalog_skipped_entries", nil)
			mu.Lock()
			got := append([]string(nil), reported...)
			mu.Unlock()
			log := logs.String()

			if tc.refused {
				if routes != good {
					t.Errorf("routes after a refused catalog:\n%s\nwant the last good ones:\n%s", routes, good)
				}
				if b, _ := os.ReadFile(cfg); !bytes.Equal(b, goodFile) {
					t.Errorf("the catalog file changed after a refused catalog:\n%s", b)
				}
				if !strings.Contains(log, "published catalog not taken") || !strings.Contains(log, tc.field) {
					t.Errorf("no refusal naming %s in the log:\n%s", tc.field, log)
				}
				if !ok || skipped != 0 || len(got) != 0 {
					t.Errorf("skipped entries %v (registered %v), reported %q, want none", skipped, ok, got)
				}
				return
			}
			if tc.noRoute != "" && strings.Contains(routes, tc.noRoute) {
				t.Errorf("a route to the skipped node's block %s:\n%s", tc.noRoute, routes)
			}
			if !ok || skipped != tc.skipped {
				t.Errorf("bridgehead_node_catalog_skipped_entries %v (registered %v), want %v", skipped, ok, tc.skipped)
			}
			if tc.skipped == 0 {
				if len(got) != 0 || strings.Contains(log, "catalog entries skipped") {
					t.Errorf("skips reported %q or logged:\n%s", got, log)
				}
				return
			}
			if n := strings.Count(log, "catalog entries skipped"); n != 1 || !strings.Contains(log, tc.field) {
				t.Errorf("%d log lines of skipped entries, want one naming %s:\n%s", n, tc.field, log)
			}
			if len(got) != 1 || !strings.Contains(got[0], tc.field) {
				t.Errorf("reported %q, want one summary naming %s", got, tc.field)
			}
		})
	}
}
