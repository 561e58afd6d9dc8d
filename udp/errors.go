package udp

import "errors"

// Argument errors shared by the binds. They signal caller bugs.
var (
	errNoBuffer = errors.New("udp: Receive needs at least one buffer, size and endpoint")
)
