package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Condition types of Site and Gateway status.
const (
	// ConditionValid: the Site (with its Gateways) passes the same
	// checks as `bridgehead check`; False names the problem and field,
	// and the Site is left out of what gateways receive.
	ConditionValid = "Valid"
	// ConditionPoolExhausted: a Site's pod CIDRs have no free block for
	// a node assigned to it.
	ConditionPoolExhausted = "PoolExhausted"
	// ConditionReady: a Gateway is up and forwarding (written by the
	// gateway itself); for a Site, at least one of its gateways is.
	ConditionReady = "Ready"
)

// CIDR is an IPv4 or IPv6 prefix with no host bits set.
// +kubebuilder:validation:MaxLength=43
// +kubebuilder:validation:XValidation:rule="isCIDR(self) && cidr(self) == cidr(self).masked()",message="must be a CIDR with no host bits set, e.g. 10.1.0.0/16 or fd00:1::/48"
type CIDR string

// IP is an IPv4 or IPv6 address.
// +kubebuilder:validation:MaxLength=39
// +kubebuilder:validation:XValidation:rule="isIP(self)",message="must be an IP address"
type IP string

// IPv6 is an IPv6 address.
// +kubebuilder:validation:MaxLength=39
// +kubebuilder:validation:XValidation:rule="isIP(self) && ip(self).family() == 6",message="must be an IPv6 address"
type IPv6 string

// Site is one location of the cluster: its address plan, its probe
// settings and its relay. The name is the site's name in the catalog.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=bridgehead
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Nodes",type=integer,JSONPath=`.status.nodes`
// +kubebuilder:printcolumn:name="Allocated",type=integer,JSONPath=`.status.allocatedBlocks`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.freeBlocks`,description="free IPv4 pod blocks"
// +kubebuilder:printcolumn:name="Gateways Ready",type=integer,JSONPath=`.status.gatewaysReady`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Site struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec SiteSpec `json:"spec"`
	// +optional
	Status SiteStatus `json:"status,omitempty"`
}

// SiteSpec is a site's address plan and settings (config.Site).
//
// Pod blocks are in use by live nodes' pods: the edits that would take a
// node's block out of the pool are refused (the block sizes cannot change,
// pod CIDRs can only be appended). The rules sit on the spec, not the
// fields, so that removing a field (which no field rule sees) is refused
// too.
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podBlockSize) || (has(self.podBlockSize) && self.podBlockSize == oldSelf.podBlockSize)",message="podBlockSize is immutable: nodes hold blocks of this size; create a new Site instead",fieldPath=".podBlockSize",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podBlockSize6) || (has(self.podBlockSize6) && self.podBlockSize6 == oldSelf.podBlockSize6)",message="podBlockSize6 is immutable: nodes hold blocks of this size; create a new Site instead",fieldPath=".podBlockSize6",reason=FieldValueForbidden
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.podCIDRs) || (has(self.podCIDRs) && oldSelf.podCIDRs.all(c, c in self.podCIDRs))",message="podCIDRs may only be appended to: nodes hold blocks of the existing ones",fieldPath=".podCIDRs",reason=FieldValueForbidden
type SiteSpec struct {
	// NodeCIDRs hold the site's node addresses; a Node whose
	// InternalIP lies in one of them belongs to the site.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=set
	// +optional
	NodeCIDRs []CIDR `json:"nodeCIDRs,omitempty"`
	// PodCIDRs are the pools that nodes' pod blocks are carved from.
	// Append-only: nodes' pods use blocks of the existing ones.
	// +kubebuilder:validation:MaxItems=1024
	// +listType=set
	// +optional
	PodCIDRs []CIDR `json:"podCIDRs,omitempty"`
	// PodBlockSize is the prefix length of each node's IPv4 pod block;
	// immutable.
	// +kubebuilder:validation:Minimum=8
	// +kubebuilder:validation:Maximum=32
	// +kubebuilder:default=24
	// +optional
	PodBlockSize int32 `json:"podBlockSize,omitempty"`
	// PodBlockSize6 is the prefix length of each node's IPv6 pod block;
	// immutable.
	// +kubebuilder:validation:Minimum=48
	// +kubebuilder:validation:Maximum=128
	// +kubebuilder:default=80
	// +optional
	PodBlockSize6 int32 `json:"podBlockSize6,omitempty"`
	// RouterAddress, when set, is the address the site's nodes route
	// remote traffic to (a load-balancer VIP in front of the gateways).
	// +optional
	RouterAddress IP `json:"routerAddress,omitempty"`
	// RouterAddress6 is the IPv6 counterpart of RouterAddress.
	// +optional
	RouterAddress6 IPv6 `json:"routerAddress6,omitempty"`
	// Keepalive is the interval of keepalive messages to this site's
	// gateways; absent or zero disables them.
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('0s') && duration(self) <= duration('1h')",message="must be between 0s and 1h"
	// +optional
	Keepalive *metav1.Duration `json:"keepalive,omitempty"`
	// ProbeInterval is how long one of this site's gateways may stay
	// silent before the others probe it; three silent intervals mark it
	// down (default 200ms).
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('50ms') && duration(self) <= duration('30s')",message="must be between 50ms and 30s"
	// +optional
	ProbeInterval *metav1.Duration `json:"probeInterval,omitempty"`
	// Via names the hub sites this site relays through toward sites
	// that neither it nor they can reach directly (gateways without an
	// endpoint, behind NAT); absent means every site with a gateway
	// endpoint.
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	// +listType=atomic
	// +optional
	Via []string `json:"via,omitempty"`
	// AllowedSources names the remote sites whose pods may reach this
	// site through the gateways; absent means every site, empty means
	// none (SiteSources).
	// +optional
	AllowedSources *SiteSources `json:"allowedSources,omitempty"`
	// Relay is the HTTP CONNECT relay that the site's gateways run for
	// API-server callbacks; absent means off.
	// +optional
	Relay *RelaySpec `json:"relay,omitempty"`
}

// RelaySpec is a site's relay (config.Relay). Each gateway listens on
// its own LAN address (Gateway spec.address) at Port.
type RelaySpec struct {
	// Port is the TCP port each gateway's relay listens on.
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// AllowedPorts are the destination ports a CONNECT may name
	// (default [10250], the kubelet).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	// +listType=set
	// +optional
	AllowedPorts []int32 `json:"allowedPorts,omitempty"`
	// AllowPodCIDRs lets CONNECT name remote pod addresses too.
	// +optional
	AllowPodCIDRs bool `json:"allowPodCIDRs,omitempty"`
	// TLS serves the relay over TLS with client certificates; the paths
	// are on each gateway's host.
	// +optional
	TLS *RelayTLS `json:"tls,omitempty"`
	// MaxConnections bounds relayed connections in total.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxConnections int32 `json:"maxConnections,omitempty"`
	// MaxConnectionsPerDestination bounds them per destination.
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxConnectionsPerDestination int32 `json:"maxConnectionsPerDestination,omitempty"`
	// IdleTimeout closes a relayed connection idle for this long.
	// +optional
	IdleTimeout *metav1.Duration `json:"idleTimeout,omitempty"`
	// HeaderTimeout cuts off a client that has not sent its CONNECT.
	// +optional
	HeaderTimeout *metav1.Duration `json:"headerTimeout,omitempty"`
	// MaxPendingPerSource bounds the connections one client address (an
	// IPv6 /64) may hold before its CONNECT is read (default 64).
	// +kubebuilder:validation:Minimum=0
	// +optional
	MaxPendingPerSource int32 `json:"maxPendingPerSource,omitempty"`
	// AllowedClients, when set, are the only client prefixes the relay
	// answers; others are closed before TLS.
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +optional
	AllowedClients []CIDR `json:"allowedClients,omitempty"`
}

// RelayTLS names the relay's certificate, key and client CA files on the
// gateways' hosts.
type RelayTLS struct {
	// +kubebuilder:validation:MinLength=1
	CertFile string `json:"certFile"`
	// +kubebuilder:validation:MinLength=1
	KeyFile string `json:"keyFile"`
	// +kubebuilder:validation:MinLength=1
	ClientCAFile string `json:"clientCAFile"`
	// ClientNames, when set, pins the clients: a certificate signed by
	// the client CA must also name one of these (common name, DNS name
	// or URI).
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=253
	// +listType=atomic
	// +optional
	ClientNames []string `json:"clientNames,omitempty"`
}

// SiteStatus is written by the controller.
type SiteStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Nodes is the number of Nodes assigned to the site.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// AllocatedBlocks is the number of pod blocks held by its nodes
	// (both families).
	// +optional
	AllocatedBlocks int32 `json:"allocatedBlocks,omitempty"`
	// FreeBlocks is the number of IPv4 pod blocks left in the pool.
	// +optional
	FreeBlocks int64 `json:"freeBlocks,omitempty"`
	// FreeBlocks6 is the number of IPv6 pod blocks left, capped at
	// 2^63-1.
	// +optional
	FreeBlocks6 int64 `json:"freeBlocks6,omitempty"`
	// Gateways and GatewaysReady count the site's Gateways and those
	// that report Ready.
	// +optional
	Gateways int32 `json:"gateways,omitempty"`
	// +optional
	GatewaysReady int32 `json:"gatewaysReady,omitempty"`
	// Conditions: Valid, PoolExhausted, Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// SiteList is a list of Sites.
type SiteList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Site `json:"items"`
}

// Gateway is one bridgehead instance of a site. Its name is
// "<site>.<gateway>" when converted from a catalog.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,categories=bridgehead,shortName=bhgw
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="Site",type=string,JSONPath=`.spec.site`
// +kubebuilder:printcolumn:name="Endpoint",type=string,JSONPath=`.status.endpoint`
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Remote Up",type=integer,JSONPath=`.status.remoteGatewaysUp`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Gateway struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec GatewaySpec `json:"spec"`
	// +optional
	Status GatewayStatus `json:"status,omitempty"`
}

// GatewaySpec is a gateway's place in its site (config.Gateway). Endpoint
// and PublicKey may be left for the gateway to publish in its status.
//
// A gateway behind NAT has no endpoint at all (config.Gateway with no
// endpoint): spec.behindNAT says so, so that the controller publishes it
// without waiting for an endpoint it will never register. It cannot also
// have a spec.endpoint.
// +kubebuilder:validation:XValidation:rule="!(has(self.behindNAT) && self.behindNAT && has(self.endpoint) && size(self.endpoint) > 0)",message="a gateway behindNAT has no endpoint: remove spec.endpoint, or set behindNAT to false",fieldPath=".endpoint",reason=FieldValueForbidden
type GatewaySpec struct {
	// Site is the name of the gateway's Site; it cannot change.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:XValidation:rule="self == oldSelf",message="site is immutable"
	Site string `json:"site"`
	// Address is the gateway's LAN address, inside its site's node
	// CIDRs.
	Address IP `json:"address"`
	// Address6 is its IPv6 LAN address.
	// +optional
	Address6 IPv6 `json:"address6,omitempty"`
	// Endpoint is host:port where peers send tunnel traffic.
	// +kubebuilder:validation:MaxLength=261
	// +kubebuilder:validation:Pattern=`^[^\s]+:[0-9]{1,5}$`
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// PublicKey is the gateway's X25519 public key, base64.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// BehindNAT: the gateway has no endpoint (it sits behind NAT, and
	// nothing can open a session toward it). It opens its sessions toward
	// the gateways that have one, and reaches other sites' gateways
	// without one through its Site's hubs (spec.via). The catalog lists
	// it without an endpoint once it has a public key; an endpoint in its
	// status is ignored.
	// +optional
	BehindNAT bool `json:"behindNAT,omitempty"`
}

// GatewayStatus is written by the gateway itself, and only by it
// (PublicKey, Endpoint, the Ready condition, remote counts): its
// credential may write this subresource of its own Gateway. The
// controller only reads it; a Gateway that fails the checks is reported
// in its Site's Valid condition.
type GatewayStatus struct {
	// ObservedGeneration is the spec generation the status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// PublicKey is the key the gateway runs with.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	// +optional
	PublicKey string `json:"publicKey,omitempty"`
	// Key rollover: the previous key and its end (keys_types.go).
	GatewayKeyRollover `json:",inline"`
	// Endpoint is the host:port the gateway receives tunnel traffic on.
	// +kubebuilder:validation:MaxLength=261
	// +optional
	Endpoint string `json:"endpoint,omitempty"`
	// RemoteGateways and RemoteGatewaysUp count the gateways of other
	// sites this gateway knows and those its probes find up.
	// +optional
	RemoteGateways int32 `json:"remoteGateways,omitempty"`
	// +optional
	RemoteGatewaysUp int32 `json:"remoteGatewaysUp,omitempty"`
	// Mesh is how this gateway reaches every remote site (MeshStatus).
	// +optional
	Mesh *MeshStatus `json:"mesh,omitempty"`
	// Conditions: Ready.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// +kubebuilder:object:root=true

// GatewayList is a list of Gateways.
type GatewayList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Gateway `json:"items"`
}
