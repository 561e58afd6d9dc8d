package golden

import (
	"os"
	"path/filepath"
	"testing"
)

// recorder is a testing.TB that records failures instead of stopping.
type recorder struct {
	testing.TB
	failed bool
}

func (r *recorder) Helper()               {}
func (r *recorder) Errorf(string, ...any) { r.failed = true }
func (r *recorder) Fatalf(string, ...any) { r.failed = true }
func (r *recorder) Fatal(...any)          { r.failed = true }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "sub", "out.golden")
	tests := []struct {
		name   string
		got    string
		update bool
		fail   bool
	}{
		{"missing file", "a", false, true},
		{"update creates it", "a", true, false},
		{"same", "a", false, false},
		{"differs", "b", false, true},
		{"update rewrites it", "b", true, false},
		{"same again", "b", false, false},
	}
	for _, tt := range tests {
		r := &recorder{TB: t}
		Check(r, path, []byte(tt.got), tt.update)
		if r.failed != tt.fail {
			t.Errorf("%s: failed %v, want %v", tt.name, r.failed, tt.fail)
		}
	}
	if b, _ := os.ReadFile(path); string(b) != "b" {
		t.Errorf("file holds %q, want %q", b, "b")
	}
}
