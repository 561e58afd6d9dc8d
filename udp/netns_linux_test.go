//go:build linux

package udp

import (
	"testing"

	"github.com/bridgehead/bridgehead/internal/netnstest"
)

// ownNetns moves the test goroutine's thread into a network namespace of
// its own (netnstest.Enter).
func ownNetns(t *testing.T, cmds ...[]string) { t.Helper(); netnstest.Enter(t, cmds...) }

// ip runs the ip command in the calling thread's namespace.
func ip(t *testing.T, args ...string) { t.Helper(); netnstest.IP(t, args...) }
