package kube

import (
	"encoding/base64"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	v1 "github.com/bridgehead/bridgehead/kube/apis/v1alpha1"
)

// gatewayKeys applies a Gateway's key rollover (status.previousPublicKey,
// previousKeyExpires, keySignature; kube/register publishes them) to its
// catalog entry out, whose publicKey is already spec.publicKey or, unset,
// status.publicKey. Only a rollover whose signature verifies counts
// (crypto.VerifyRollover: the previous key names the new one and the end
// of the overlap):
//
//   - The entry's key is the previous key (spec pins it): the gateway
//     rotated from the pinned key, which vouches for the new one. The
//     entry takes the new key, and the previous one until the overlap
//     ends. No `bridgehead gateway approve-key` is needed; the admission
//     policy (deploy/kubernetes/gateway-keys.yaml) lets such a status in,
//     and this check is what makes it count.
//   - The entry's key is the new key: peers also accept the previous key
//     until the overlap ends.
//
// Anything else (no signature, a bad one, a previous key that is not the
// trusted one) leaves the entry as it is: a key nothing vouches for
// still needs approve-key, as a reimaged gateway's does. A rollover
// whose overlap is over stays listed: peers refuse the previous key after
// it, and the new key stays vouched for while spec still pins the old.
func gatewayKeys(out *config.Gateway, g *v1.Gateway) {
	r := g.Status.GatewayKeyRollover
	if r.PreviousPublicKey == "" || r.PreviousKeyExpires == nil || r.KeySignature == "" || g.Status.PublicKey == "" {
		return
	}
	prev, err1 := bhcrypto.ParsePublicKey(r.PreviousPublicKey)
	next, err2 := bhcrypto.ParsePublicKey(g.Status.PublicKey)
	sig, err3 := base64.StdEncoding.DecodeString(r.KeySignature)
	if err1 != nil || err2 != nil || err3 != nil || !bhcrypto.VerifyRollover(prev, next, r.PreviousKeyExpires.Time, sig) {
		return
	}
	switch out.PublicKey {
	case r.PreviousPublicKey:
		out.PublicKey = g.Status.PublicKey
	case g.Status.PublicKey:
	default:
		return
	}
	out.PreviousPublicKey, out.PreviousKeyExpires = r.PreviousPublicKey, r.PreviousKeyExpires.UTC()
}
