// Package golden compares a test's output with a file under testdata,
// and rewrites the file when the test binary runs with -update.
//
// Each test package keeps its own -update flag (flags belong to the test
// binary, not to this package) and passes its value in.
package golden

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// Check fails t unless got equals the file at path. With update it first
// writes got there, creating the directory.
func Check(t testing.TB, path string, got []byte, update bool) {
	t.Helper()
	if update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run the test with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("output differs from %s (the test with -update rewrites it):\n--- got\n%s--- want\n%s", path, got, want)
	}
}
