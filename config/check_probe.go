package config

import "fmt"

// checkProbes refuses probe intervals the router cannot honour and warns
// about readyWindow, which no longer has an effect.
func checkProbes(c *Config, r *reporter) {
	for i, s := range c.Sites {
		if s.ProbeInterval == 0 {
			continue
		}
		if s.ProbeInterval < MinProbeInterval || s.ProbeInterval > MaxProbeInterval {
			r.errorf(fmt.Sprintf("sites[%d].probeInterval", i),
				"%s is out of range: probe intervals go from %s (failover in about %s) to %s (about %s)",
				s.ProbeInterval, MinProbeInterval, 3*MinProbeInterval, MaxProbeInterval, 3*MaxProbeInterval)
		}
	}
	if c.Metrics.ReadyWindow != 0 {
		r.warnf("metrics.readyWindow",
			"readyWindow is no longer used and can be removed: a site is reachable while one of its gateways answers probes (sites[].probeInterval, default %s)",
			DefaultProbeInterval)
	}
}
