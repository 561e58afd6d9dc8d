package e2e

import (
	"os"
	"testing"
)

// TestMain removes the binaries the tests built (tens of MB per run) once
// every test is done.
func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		if err := os.RemoveAll(buildDir); err != nil {
			os.Stderr.WriteString("e2e: removing built binaries: " + err.Error() + "\n")
		}
	}
	os.Exit(code)
}
