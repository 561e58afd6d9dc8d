package daemon

import (
	"testing"

	"github.com/bridgehead/bridgehead/config"
	"github.com/bridgehead/bridgehead/router"
)

// TestProbeBoundsAgree: config check refuses exactly the probe intervals
// the router would clamp.
func TestProbeBoundsAgree(t *testing.T) {
	if config.DefaultProbeInterval != router.DefaultProbeInterval ||
		config.MinProbeInterval != router.MinProbeInterval ||
		config.MaxProbeInterval != router.MaxProbeInterval {
		t.Fatalf("config probe bounds %v/%v/%v, router %v/%v/%v",
			config.DefaultProbeInterval, config.MinProbeInterval, config.MaxProbeInterval,
			router.DefaultProbeInterval, router.MinProbeInterval, router.MaxProbeInterval)
	}
}
