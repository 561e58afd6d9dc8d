package controller

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
	"github.com/bridgehead/bridgehead/kube/follow"
)

// TestKubeCatalogNATSite: a hub-and-spoke catalog from the cluster. The
// hub site-h has a gateway with an endpoint; site-n's gateway sits
// behind NAT (spec.behindNAT, no endpoint) and relays through site-h
// (spec.via). The published catalog, as site-n's gateway follows it,
// parses with config.ParseSites and passes config.Check, with site-n's
// gateway listed without an endpoint and site-h as its hub. Before
// behindNAT, the plan dropped every gateway without an endpoint, so
// site-n had no gateway and was left out of the catalog.
func TestKubeCatalogNATSite(t *testing.T) {
	h := startKube(t)
	ctx := context.Background()
	h.createSite(t, "site-h", []string{"10.40.0.0/16"}, []string{"10.140.0.0/16"}, 24, 64)
	h.createSite(t, "site-n", []string{"10.50.0.0/16"}, []string{"10.150.0.0/16"}, 24, 64)
	if _, err := h.dyn.Resource(SitesGVR).Patch(ctx, "site-n", types.MergePatchType, []byte(`{"spec":{"via":["site-h"]}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	h.createGateway(t, "site-h", "gw1", "10.40.0.1", "203.0.113.40:51820")
	createNAT := func(name, endpoint string) error {
		g := testGateway("site-n", name, "10.50.0.1", endpoint, testKey("site-n/"+name))
		g.Spec.BehindNAT = true
		g.TypeMeta = metav1.TypeMeta{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Gateway"}
		u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(g)
		if err != nil {
			t.Fatal(err)
		}
		_, err = h.dyn.Resource(GatewaysGVR).Create(ctx, &unstructured.Unstructured{Object: u}, metav1.CreateOptions{})
		return err
	}
	// The API server refuses a NATed gateway with an endpoint.
	if err := createNAT("gw9", "198.51.100.9:51820"); !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "behindNAT has no endpoint") {
		t.Fatalf("behindNAT with an endpoint: %v, want Invalid", err)
	}
	if err := createNAT("gw1", ""); err != nil {
		t.Fatal(err)
	}
	if err := h.createNode(ctx, "bhc-nat-n1", "10.50.1.1"); err != nil {
		t.Fatal(err)
	}
	if err := h.createNode(ctx, "bhc-nat-h1", "10.40.1.1"); err != nil {
		t.Fatal(err)
	}
	w := watchCatalog(t, h.cs)
	in := h.start(t, "bhc-nat", nil)
	waitLeader(t, h, in, 30*time.Second)
	w.waitFor(t, 15*time.Second, "both sites, each with its node", func() bool {
		_, n := hasNode(w.siteNodes("site-n"), "bhc-nat-n1")
		_, hh := hasNode(w.siteNodes("site-h"), "bhc-nat-h1")
		return n && hh && slices.Equal(w.siteNames(), []string{"site-h", "site-n"})
	})

	// What site-n's gateway would write and load.
	sites, err := w.assemble("site-n")
	if err != nil {
		t.Fatal(err)
	}
	data, err := follow.Render(sites, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.ParseSites("catalog.yaml", data)
	if err != nil {
		t.Fatalf("ParseSites: %v\n%s", err, data)
	}
	c.Site, c.Gateway = "site-n", "gw1"
	if problems, warnings := config.Check(c, config.CheckOptions{SkipPrivateKey: true}); problems != nil {
		t.Fatalf("config.Check: %v (warnings %v)\n%s", problems, warnings, data)
	}
	n := c.SiteByName("site-n")
	if n == nil || len(n.Gateways) != 1 || n.Gateways[0].HasEndpoint() || n.Gateways[0].PublicKey == "" {
		t.Fatalf("site-n in the catalog: %+v, want its gateway with a key and no endpoint\n%s", n, data)
	}
	if hubs := c.HubsOf("site-n"); !slices.Equal(hubs, []string{"site-h"}) {
		t.Errorf("site-n's hubs %v, want [site-h]", hubs)
	}
	t.Logf("site-n's catalog (%d bytes):\n%s", len(data), data)
}
