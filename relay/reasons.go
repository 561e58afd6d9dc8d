package relay

import "net/http"

// Reason says why the relay refused or cut off a connection. The
// strings are the reason label of bridgehead_relay_refused_total and
// stable.
type Reason string

// Refusal reasons, each with the status the client gets.
const (
	ReasonNone Reason = ""
	// 400: not an HTTP request, a malformed CONNECT target, headers too large.
	ReasonBadRequest Reason = "bad_request"
	// 405: a method other than CONNECT (the relay is not a web proxy).
	ReasonMethod Reason = "method"
	// 403: a host name instead of an IP literal.
	ReasonHostname Reason = "hostname"
	// 403: an address outside every site.
	ReasonNotInSite Reason = "not_in_site"
	// 403: an address of the local site.
	ReasonLocalSite Reason = "local_site"
	// 403: a remote pod address while allowPodCIDRs is off.
	ReasonPodCIDR Reason = "pod_cidr"
	// 403: a port not in allowedPorts.
	ReasonPort Reason = "port"
	// 503: maxConnections reached.
	ReasonLimit Reason = "limit"
	// 503: maxConnectionsPerDestination reached.
	ReasonDestinationLimit Reason = "destination_limit"
	// No response: TLS handshake and request not done in headerTimeout.
	ReasonHeaderTimeout Reason = "header_timeout"
	// No response: the TLS handshake failed (e.g. a client certificate
	// from another CA).
	ReasonTLS Reason = "tls"
	// 503: the client's source has maxPendingPerSource connections in
	// the request phase already.
	ReasonSourceLimit Reason = "source_limit"
	// No response: the client's address is outside allowedClients.
	ReasonClientNotAllowed Reason = "client_not_allowed"
	// No response: the client certificate verified, but names none of
	// the allowed client identities (LoadTLS).
	ReasonClientIdentity Reason = "client_identity"
	// 502 / 504: the destination refused or did not answer.
	ReasonDialFailed  Reason = "dial_failed"
	ReasonDialTimeout Reason = "dial_timeout"
)

// Reasons lists every refusal reason, for zero-valued metrics.
func Reasons() []Reason {
	return []Reason{ReasonBadRequest, ReasonMethod, ReasonHostname, ReasonNotInSite, ReasonLocalSite,
		ReasonPodCIDR, ReasonPort, ReasonLimit, ReasonDestinationLimit, ReasonHeaderTimeout, ReasonTLS,
		ReasonDialFailed, ReasonDialTimeout, ReasonSourceLimit, ReasonClientNotAllowed, ReasonClientIdentity}
}

// status is the HTTP status a refusal answers with; 0 for none.
func (r Reason) status() int {
	switch r {
	case ReasonBadRequest:
		return http.StatusBadRequest
	case ReasonMethod:
		return http.StatusMethodNotAllowed
	case ReasonHostname, ReasonNotInSite, ReasonLocalSite, ReasonPodCIDR, ReasonPort:
		return http.StatusForbidden
	case ReasonLimit, ReasonDestinationLimit, ReasonSourceLimit:
		return http.StatusServiceUnavailable
	case ReasonDialFailed:
		return http.StatusBadGateway
	case ReasonDialTimeout:
		return http.StatusGatewayTimeout
	}
	return 0
}

// Close reasons of relayed connections (the reason label of
// bridgehead_relay_closed_total and the access log's close field).
const (
	CloseDone     = "done"     // both sides finished (half-closes both ways)
	CloseIdle     = "idle"     // no bytes either way for idleTimeout
	CloseRevoked  = "revoked"  // a reload removed the destination from the allow-list, or the client from allowedClients
	CloseShutdown = "shutdown" // the relay stopped
	CloseError    = "error"    // a read or write failed (reset, timeout)
)

// closeReasons lists every close reason, for zero-valued metrics.
var closeReasons = []string{CloseDone, CloseIdle, CloseRevoked, CloseShutdown, CloseError}
