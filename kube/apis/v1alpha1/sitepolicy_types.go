package v1alpha1

// SiteSources is a Site's source allow-list (spec.allowedSources): the
// names of the remote sites whose pod CIDRs may reach this site through
// the gateways at all. A pointer to it tells absent from empty:
//
//   - absent (nil): every site's pods may reach this site, as before the
//     field existed;
//   - empty ([]): no remote site's pods may (this site's own pods and
//     every site's node CIDRs still may: kubelets, the API server and
//     probes use them);
//   - a list: only the pods of the sites named.
//
// The sending gateway drops refused packets before it seals them, the
// receiving gateway right after it opens them; both count them
// (bridgehead_site_policy_drops_total). It is defence in depth beneath
// NetworkPolicy, not a replacement: it filters by site, never by pod.
//
// +kubebuilder:validation:MaxItems=1024
// +kubebuilder:validation:items:MaxLength=63
type SiteSources []string
