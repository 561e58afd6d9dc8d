package tun

import "errors"

// Argument errors shared by the backends. They are never wrapped, so callers
// may compare them, but they signal caller bugs rather than device state.
var (
	errNoBuffer  = errors.New("tun: Read needs at least one buffer and one size")
	errBadOffset = errors.New("tun: offset outside buffer")
)
