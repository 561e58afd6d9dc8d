package v1alpha1_test

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/bridgehead/bridgehead/internal/kubetest"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// TestSiteSpecTransitions: the API server refuses the Site edits that
// would take pod blocks from live nodes (a block size change, a pod CIDR
// removed) and accepts the others, including a pod CIDR appended.
func TestSiteSpecTransitions(t *testing.T) {
	env := kubetest.Start(t)
	env.InstallCRDs(t, "../../../deploy/kubernetes/crds")
	dc, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	sites := dc.Resource(v1.SchemeGroupVersion.WithResource(v1.SitesResource))
	for i, tc := range []struct {
		name  string
		patch string // JSON merge patch of the Site created below
		want  string // "" accepted, else in the Invalid error
	}{
		{"podBlockSize changed", `{"spec":{"podBlockSize":25}}`, "podBlockSize is immutable"},
		{"podBlockSize6 changed", `{"spec":{"podBlockSize6":64}}`, "podBlockSize6 is immutable"},
		{"podBlockSize removed (defaults to 24)", `{"spec":{"podBlockSize":null}}`, "podBlockSize is immutable"},
		{"pod CIDR removed", `{"spec":{"podCIDRs":["10.101.0.0/16"]}}`, "podCIDRs may only be appended to"},
		{"pod CIDR replaced", `{"spec":{"podCIDRs":["10.101.0.0/16","fd00:102::/48"]}}`, "podCIDRs may only be appended to"},
		{"pod CIDRs dropped", `{"spec":{"podCIDRs":null}}`, "podCIDRs may only be appended to"},
		{"pod CIDR appended", `{"spec":{"podCIDRs":["10.101.0.0/16","fd00:101::/48","10.102.0.0/16"]}}`, ""},
		{"node CIDRs changed", `{"spec":{"nodeCIDRs":["10.9.0.0/16"]}}`, ""},
		{"same block size", `{"spec":{"podBlockSize":26,"podBlockSize6":80}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "s" + string(rune('a'+i))
			site := &v1.Site{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: v1.SiteSpec{
				NodeCIDRs:    []v1.CIDR{"10.1.0.0/16"},
				PodCIDRs:     []v1.CIDR{"10.101.0.0/16", "fd00:101::/48"},
				PodBlockSize: 26,
			}}
			if _, err := sites.Create(ctx, toUnstructured(t, site, "Site"), metav1.CreateOptions{}); err != nil {
				t.Fatalf("create: %v", err)
			}
			_, err := sites.Patch(ctx, name, types.MergePatchType, []byte(tc.patch), metav1.PatchOptions{})
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("patch %s: %v, want accepted", tc.patch, err)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("patch %s: %v, want invalid: %s", tc.patch, err, tc.want)
			}
		})
	}
}
