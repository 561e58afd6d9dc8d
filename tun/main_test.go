package tun

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if any test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testOffset is the offset tests pass to Read and Write.
const testOffset = HeadroomNeeded + 6
