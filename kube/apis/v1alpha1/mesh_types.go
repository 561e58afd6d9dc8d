package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Mesh row states (MeshRow.State), as package mesh names them.
const (
	MeshUp         = "up"
	MeshDegraded   = "degraded"
	MeshDown       = "down"
	MeshConnecting = "connecting"
)

// MeshStatus is one gateway's view of every remote site: one row per
// remote site, never per remote gateway, so its size grows with the
// sites of the cluster and not with their gateways. The gateway writes it
// (package kube/meshstatus) when a row's state or path changes and
// otherwise at most every refresh interval, so RTT, loss and MTU may be
// that old; State and Path are current within a write's delay.
type MeshStatus struct {
	// ObservedAt is when the gateway measured the rows.
	// +optional
	ObservedAt metav1.Time `json:"observedAt,omitempty"`
	// Rows: one per remote site, sorted by site.
	// +listType=map
	// +listMapKey=site
	// +kubebuilder:validation:MaxItems=4096
	// +optional
	Rows []MeshRow `json:"rows,omitempty"`
}

// MeshRow is how one gateway reaches one remote site.
type MeshRow struct {
	// Site is the remote site.
	// +kubebuilder:validation:MaxLength=253
	Site string `json:"site"`
	// State: up (every gateway of the site answers), degraded (some do,
	// or a path carries only small packets), down (none does),
	// connecting (none has answered yet).
	// +kubebuilder:validation:Enum=up;degraded;down;connecting
	State string `json:"state"`
	// Path: direct, hub (relayed through a hub site, Via names it) or
	// standby (some of the site's gateways are down: its flows go to
	// the others, Via names them). Empty while down.
	// +kubebuilder:validation:Enum="";direct;hub;standby
	// +optional
	Path string `json:"path,omitempty"`
	// Via names the hub sites or standby gateways of Path.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Via []string `json:"via,omitempty"`
	// GatewaysUp of Gateways of the remote site answer our probes.
	// +optional
	GatewaysUp int32 `json:"gatewaysUp,omitempty"`
	// +optional
	Gateways int32 `json:"gateways,omitempty"`
	// RTTMicroseconds is the median probe round trip over the recent
	// window (0: none answered).
	// +optional
	RTTMicroseconds int64 `json:"rttMicroseconds,omitempty"`
	// LossPermille is the share of probes unanswered over the recent
	// window, in thousandths.
	// +optional
	LossPermille int32 `json:"lossPermille,omitempty"`
	// MTU is the largest inner packet every up gateway's path carries
	// (0: not checked yet).
	// +optional
	MTU int32 `json:"mtu,omitempty"`
	// Since is when State or Path last changed.
	// +optional
	Since metav1.Time `json:"since,omitempty"`
}
