package config

import "time"

// Drain is the drain section: what a gateway does on SIGTERM before it
// exits (package daemon, drain.go). It answers /readyz 503 and tells its
// peers it is draining at once, keeps forwarding, and exits once no data
// has crossed it for Quiet, or when Timeout has passed, whichever comes
// first. A second SIGTERM or SIGINT stops it at once. A reload applies a
// change to a drain that has not started yet.
type Drain struct {
	// Timeout bounds the drain (DefaultDrainTimeout when zero). Keep it
	// below systemd's TimeoutStopSec and Kubernetes'
	// terminationGracePeriodSeconds, which kill the process after theirs.
	Timeout time.Duration `yaml:"timeout"`
	// Quiet is how long no data may cross the gateway, either way, for
	// it to count as drained (DefaultDrainQuiet when zero). It is also
	// the shortest drain. Set it at least as long as the load balancer
	// in front of the site's gateways takes to act on /readyz when the
	// LAN side's traffic is sparse.
	Quiet time.Duration `yaml:"quiet"`
}

// Defaults and bounds of the drain section.
const (
	DefaultDrainTimeout = 25 * time.Second
	DefaultDrainQuiet   = 2 * time.Second
	MinDrainTimeout     = time.Second
	MaxDrainTimeout     = 10 * time.Minute
	MinDrainQuiet       = 100 * time.Millisecond
)

// DrainTimeout is drain.timeout or its default.
func (c *Config) DrainTimeout() time.Duration {
	if c.Drain.Timeout == 0 {
		return DefaultDrainTimeout
	}
	return c.Drain.Timeout
}

// DrainQuiet is drain.quiet or its default.
func (c *Config) DrainQuiet() time.Duration {
	if c.Drain.Quiet == 0 {
		return DefaultDrainQuiet
	}
	return c.Drain.Quiet
}
