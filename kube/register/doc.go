// Package register lets a gateway publish itself in its Gateway's status:
// its public key, its endpoint, its readiness (the Ready condition) and
// how many remote gateways it sees up. A scale-set instance that was
// reimaged with a new key then joins with no catalog edit.
//
// A Publisher polls its Source on a ticker (every Interval, a few
// seconds) and writes only when what it would publish changed, so a
// flapping liveness is coalesced to at most one write per Interval. It
// writes with server-side apply on the status subresource under its own
// field manager, so the controller's conditions on the same object (Valid)
// are left alone. A failed write (API server away) is retried on the next
// tick; the gateway's forwarding never waits on it.
//
// The credential is the gateway's own (deploy/kubernetes/README.md): it
// may write only this Gateway's status.
//
// The key is pinned by the API server, not here: the admission policy
// bridgehead-gateway-key-pin (deploy/kubernetes/gateway-keys.yaml) lets
// the first registration set status.publicKey and refuses any other key
// but the one the operator approved in spec.publicKey (`bridgehead
// gateway admit SITE/NAME --approve-key KEY`). The gateway cannot pin or
// approve anything itself (its credential writes the status subresource,
// where spec and metadata are not writable). A refused key (KeyRefused)
// is logged once at error with the API server's message, which names the
// approving command, and retried every Interval like any failed write:
// once approved, the next tick registers it.
//
// Concurrency: Run owns all of the Publisher's state; Source is called
// from Run's goroutine only.
package register
