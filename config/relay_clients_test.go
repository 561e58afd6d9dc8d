package config

import (
	"net/netip"
	"slices"
	"testing"
)

// TestRelayClientFields: the relay's client limits decode: the request
// phase bound per source, the client allow-list and the pinned client
// identities.
func TestRelayClientFields(t *testing.T) {
	c := mustParse(t, relayAt(`relay:
  listen: 10.0.0.10:8131
  maxPendingPerSource: 8
  allowedClients: [10.0.0.0/24, "2001:db8::/64"]
  tls:
    certFile: a.crt
    keyFile: a.key
    clientCAFile: ca.crt
    clientNames: [kube-apiserver, konnectivity-server]`))
	r := c.Relay
	want := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24"), netip.MustParsePrefix("2001:db8::/64")}
	if r.MaxPendingPerSource != 8 || !slices.Equal(r.AllowedClients, want) ||
		!slices.Equal(r.TLS.ClientNames, []string{"kube-apiserver", "konnectivity-server"}) {
		t.Fatalf("decoded %+v, tls %+v", r, r.TLS)
	}
}
