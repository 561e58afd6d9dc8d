package nodeagent

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a test leaves a goroutine behind (the
// agent's loop, a route subscription, a file watcher).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
