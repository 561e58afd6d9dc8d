package controller

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bridgehead/bridgehead/controller/azureroutes"
	"github.com/bridgehead/bridgehead/controller/azureroutes/armfake"
)

// TestKubeAzureRoutes: with Options.AzureRoutes, the leader keeps the
// site's Azure route table (the ARM fake, through the real armnetwork
// client) in step with what it publishes, with no step by hand: every
// node of the site gets a route for its pod range via the node as it
// joins, the other site's CIDRs route via the site's routerAddress, a
// deleted node's route goes once its block leaves the catalog, and a
// route deleted by hand comes back at the next sync. Before, these were
// `bridgehead routes --format azure` run by hand at every join.
func TestKubeAzureRoutes(t *testing.T) {
	h := startKube(t)
	ctx := context.Background()
	h.createSite(t, "azure", []string{"10.10.0.0/16"}, []string{"10.244.0.0/16"}, 24, 0)
	if _, err := h.dyn.Resource(SitesGVR).Patch(ctx, "azure", types.MergePatchType, []byte(`{"spec":{"routerAddress":"10.10.0.100"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.createGateway(t, "azure", "gw1", "10.10.0.4", "198.51.100.1:51820")
	h.createSite(t, "onprem", []string{"192.168.40.0/24"}, []string{"10.245.0.0/16"}, 24, 0)
	h.createGateway(t, "onprem", "gw1", "192.168.40.2", "203.0.113.7:51820")

	f := armfake.New(t)
	syncer, err := azureroutes.New(azureroutes.Options{Client: f.Client(t), ResourceGroup: f.ResourceGroup, RouteTable: f.RouteTable,
		Site: "azure", Registry: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	in := h.start(t, "bhc-azure", func(o *Options) { o.AzureRoutes = syncer; o.AzureRouteInterval = 200 * time.Millisecond })
	waitLeader(t, h, in, 30*time.Second)

	nodeRoutes := func() (nodes, remote []string) {
		for _, l := range f.Contents() {
			switch {
			case strings.HasPrefix(l, "bh-azure-pod-"):
				nodes = append(nodes, l)
			case strings.HasPrefix(l, "bh-onprem-"):
				remote = append(remote, l)
			}
		}
		return nodes, remote
	}
	for i := range 3 {
		if err := h.createNode(ctx, fmt.Sprintf("aks-%d", i), fmt.Sprintf("10.10.1.%d", 10+i)); err != nil {
			t.Fatal(err)
		}
	}
	waitTrue(t, 30*time.Second, "three node routes and the remote site's two", func() bool {
		n, r := nodeRoutes()
		return len(n) == 3 && len(r) == 2
	})
	n, r := nodeRoutes()
	for _, l := range r {
		if !strings.HasSuffix(l, " 10.10.0.100") {
			t.Errorf("remote route %q: want next hop the routerAddress", l)
		}
	}
	for i, l := range n {
		if !strings.HasSuffix(l, fmt.Sprintf(" 10.10.1.%d", 10+i)) {
			t.Errorf("node route %q: want next hop the node", l)
		}
	}
	t.Logf("table: %v", f.Contents())

	// A leave, and a hand edit.
	if err := h.cs.CoreV1().Nodes().Delete(ctx, "aks-1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Edit(func(routes map[string]armfake.Route) { delete(routes, strings.Fields(r[0])[0]) })
	waitTrue(t, 30*time.Second, "aks-1's route gone, the remote route back", func() bool {
		n, r := nodeRoutes()
		return len(n) == 2 && len(r) == 2 && !strings.HasSuffix(n[0], " 10.10.1.11") && !strings.HasSuffix(n[1], " 10.10.1.11")
	})
}
