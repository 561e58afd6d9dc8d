package daemon

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/bridgehead/bridgehead/config"
	bhcrypto "github.com/bridgehead/bridgehead/crypto"
	"github.com/bridgehead/bridgehead/relay"
	"github.com/bridgehead/bridgehead/router"
	"github.com/bridgehead/bridgehead/transit"
)

// validConfig is a config file that validate accepted, with what its
// parts are given: the router's config, the key ring, the relay's
// config and the relay plan. Built by validate, read-only after.
type validConfig struct {
	cfg    *config.Config
	router *router.Config
	ring   *bhcrypto.KeyRing
	relay  *relay.Config // nil when the relay is off
	plan   *transit.Plan
	self   transit.GatewayID
}

// runningConfig is what validate compares a reload's config with: the
// running config and the router's key ring.
type runningConfig struct {
	cfg  *config.Config
	ring *bhcrypto.KeyRing
}

// validate is the one path a config file's contents take into a gateway,
// at start (Run, running nil) and at every reload (running the gateway's
// config and key ring), so that a file one refuses the other refuses with
// the same error. It reports decoding and address-plan problems together,
// the list `bridgehead check` prints, each naming file, line and field;
// logs the warnings; refuses a change of what a running gateway cannot
// change (restartOnly); and translates the config for the router, the key
// ring, the relay and the relay plan, each error naming the file. It
// changes nothing: a refused file leaves the running config untouched.
func validate(path string, data []byte, opts config.CheckOptions, running *runningConfig, now time.Time, log *slog.Logger) (*validConfig, error) {
	next, problems, warnings := config.CheckData(path, data, opts)
	for _, w := range warnings {
		log.Warn("config warning", "file", w.File, "line", w.Line, "field", w.Field, "msg", w.Msg)
	}
	if len(problems) > 0 {
		return nil, problems
	}
	var prevRing *bhcrypto.KeyRing
	if running != nil {
		if err := restartOnly(running.cfg, next); err != nil {
			return nil, err
		}
		prevRing = running.ring
	}
	v := &validConfig{cfg: next}
	var err error
	if v.router, err = routerConfig(next); err != nil {
		return nil, fmt.Errorf("%s: %w", next.Path, err)
	}
	if v.ring, err = keyRing(next, prevRing, now); err != nil { // errors name the file (keys.go)
		return nil, err
	}
	if v.relay, err = relayConfig(next); err != nil {
		return nil, fmt.Errorf("%s: %w", next.Path, err)
	}
	if v.plan, v.self, err = transitPlan(next); err != nil {
		return nil, fmt.Errorf("%s: %w", next.Path, err)
	}
	return v, nil
}
