// Package promreg registers a component's Prometheus series the one way
// bridgehead does: every labelled series exists from zero, so a scrape
// shows it before its first event, and registration fails the
// component's constructor instead of panicking.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers each collector on reg in order and returns the
// first error; the collectors after it are not registered.
func Register(reg prometheus.Registerer, cs ...prometheus.Collector) error {
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Adopt registers c on reg, or returns the collector registered under
// the same description before (a component restarted on the same
// registry takes over its predecessor's series, so the counters keep
// counting). The first other error is kept in *err, and c returned.
func Adopt[C prometheus.Collector](reg prometheus.Registerer, c C, err *error) C {
	if e := reg.Register(c); e != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(e, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
		if *err == nil {
			*err = e
		}
	}
	return c
}

// Zero creates the series of vec for each label value, at zero.
func Zero[M any](vec interface{ WithLabelValues(...string) M }, values ...string) {
	for _, v := range values {
		vec.WithLabelValues(v)
	}
}

// Results is a counter by result, ok or error, both series created at
// zero, registered on reg unless reg is nil.
func Results(reg prometheus.Registerer, name, help string) (*prometheus.CounterVec, error) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, []string{"result"})
	Zero(vec, "ok", "error")
	if reg != nil {
		if err := reg.Register(vec); err != nil {
			return nil, err
		}
	}
	return vec, nil
}
