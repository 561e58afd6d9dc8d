package transit

import "time"

// NATKeepalive is the longest a gateway without an endpoint stays silent
// toward a gateway with one: a third of the shortest NAT UDP mapping
// timeout operators meet (30 s), so two lost keepalives in a row still
// leave the mapping open. See "Keepalives through the NAT" in doc.go.
const NATKeepalive = 10 * time.Second
