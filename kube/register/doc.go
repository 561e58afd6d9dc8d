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
// Concurrency: Run owns all of the Publisher's state; Source is called
// from Run's goroutine only.
package register
