package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of bridgehead's resources.
const GroupName = "bridgehead.io"

// SchemeGroupVersion is bridgehead.io/v1alpha1.
var SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}

// Resource names, for clients and RBAC rules.
const (
	SitesResource    = "sites"
	GatewaysResource = "gateways"
)

// SchemeBuilder registers the types; AddToScheme adds them to a scheme.
var (
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	AddToScheme   = SchemeBuilder.AddToScheme
)

func addKnownTypes(s *runtime.Scheme) error {
	s.AddKnownTypes(SchemeGroupVersion, &Site{}, &SiteList{}, &Gateway{}, &GatewayList{})
	metav1.AddToGroupVersion(s, SchemeGroupVersion)
	return nil
}

// Resource is a GroupResource of this group, for errors.
func Resource(r string) schema.GroupResource {
	return SchemeGroupVersion.WithResource(r).GroupResource()
}
