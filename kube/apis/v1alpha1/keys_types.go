package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GatewayKeyRollover is what a gateway publishes in its status during a
// key rollover: its previous key, which its peers keep accepting until
// PreviousKeyExpires, and the previous key's signature over the new one
// (KeySignature), which lets a rotation through without `bridgehead
// gateway approve-key` (docs/operations/key-rotation.md). Written by
// the gateway (kube/register), read by the catalog renderer.
type GatewayKeyRollover struct {
	// PreviousPublicKey is the key the gateway ran with before its
	// current one.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{43}=$`
	// +optional
	PreviousPublicKey string `json:"previousPublicKey,omitempty"`
	// PreviousKeyExpires is when peers stop accepting PreviousPublicKey.
	// +optional
	PreviousKeyExpires *metav1.Time `json:"previousKeyExpires,omitempty"`
	// KeySignature is PreviousPublicKey's XEdDSA signature over the
	// rollover statement (package crypto, SignRollover), base64.
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9+/]{86}==$`
	// +optional
	KeySignature string `json:"keySignature,omitempty"`
}
